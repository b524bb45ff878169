/*
 * f8c's JSON model descriptions: a short description of a GPT, Llama or MoE architecture
 * ({"arch": "gpt", "layers": 12, "hidden": 768, ...}) built directly into the IR with high-level
 * ops and scope names like `layers.3.attn.qkv`.
 */
#ifndef F8_FRONTEND_JSON_MODEL_JSON_H
#define F8_FRONTEND_JSON_MODEL_JSON_H

#include <stddef.h> // size_t

#include "ir/diag.h"  // f8_status, f8_diag
#include "ir/graph.h" // f8_graph

/*
 * Builds the forward graph described by the JSON `text` (`len` bytes; `filename` names it in
 * diagnostics). On success *out owns the graph, types inferred; on failure *out is NULL and
 * `diag` names the JSON line:column and the field at fault.
 */
f8_status f8_json_model_parse(const char *text, size_t len, const char *filename, f8_graph **out,
			      f8_diag *diag);

/* f8_json_model_parse on the contents of the file at `path`. */
f8_status f8_json_model_load(const char *path, f8_graph **out, f8_diag *diag);

#endif
