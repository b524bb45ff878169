/* Placeholder until the JSON frontend lands (being written now). */
#include "frontend/json/model_json.h"

f8_status f8_json_model_parse(const char *text, size_t len, const char *filename, f8_graph **out,
			      f8_diag *diag) {
	(void)text, (void)len, (void)filename;
	*out = NULL;
	return f8_diag_set(diag, F8_ERR_UNSUPPORTED, "JSON model descriptions are not built yet");
}

f8_status f8_json_model_load(const char *path, f8_graph **out, f8_diag *diag) {
	return f8_json_model_parse("", 0, path, out, diag);
}
