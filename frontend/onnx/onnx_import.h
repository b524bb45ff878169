/*
 * The ONNX frontend: an ONNX model file (from torch.onnx or any exporter, weights inline or in
 * external data) -> the IR, shape computations folded into static (symbolic) shapes.
 */
#ifndef F8_FRONTEND_ONNX_ONNX_IMPORT_H
#define F8_FRONTEND_ONNX_ONNX_IMPORT_H

#include "frontend/frontend.h" // f8_dim_binding
#include <stddef.h> // size_t

#include "ir/diag.h"  // f8_status, f8_diag
#include "ir/graph.h" // f8_graph

/*
 * Loads the ONNX model at `path`. External data is read relative to the model's folder and only
 * from inside it. On success *out owns the graph, types inferred; on failure *out is NULL and
 * `diag` names the node (name and index) or the tensor at fault.
 */
f8_status f8_onnx_load(const char *path, f8_graph **out, f8_diag *diag);

/* f8_onnx_load with `--dim` bindings (n_dims of them) applied to the graph inputs' symbolic
 * dims as they are read, so shape computations on them fold to constants. A binding that names
 * no input dim is an error (F8_ERR_ARGUMENT). */
f8_status f8_onnx_import(const char *path, const f8_dim_binding *dims, uint32_t n_dims,
			 f8_graph **out, f8_diag *diag);

/*
 * f8_onnx_import of a model in memory (`size` bytes, not kept): `name` stands for it in messages
 * and locations; `folder` (ending in '/') is where its external data is read from, or NULL to
 * refuse external data.
 */
f8_status f8_onnx_import_memory(const void *bytes, size_t size, const char *name,
				const char *folder, const f8_dim_binding *dims, uint32_t n_dims,
				f8_graph **out, f8_diag *diag);

#endif
