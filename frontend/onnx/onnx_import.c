/* Placeholder while the ONNX loader is written. */
#include "frontend/onnx/onnx_import.h"

f8_status f8_onnx_load(const char *path, f8_graph **out, f8_diag *diag) {
	(void)path;
	*out = NULL;
	return f8_diag_set(diag, F8_ERR_UNSUPPORTED, "ONNX import is not built yet");
}
