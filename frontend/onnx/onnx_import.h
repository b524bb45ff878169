/*
 * The ONNX frontend: an ONNX model file (from torch.onnx or any exporter, weights inline or in
 * external data) -> the IR, shape computations folded into static (symbolic) shapes.
 */
#ifndef F8_FRONTEND_ONNX_ONNX_IMPORT_H
#define F8_FRONTEND_ONNX_ONNX_IMPORT_H

#include "ir/diag.h"  // f8_status, f8_diag
#include "ir/graph.h" // f8_graph

/*
 * Loads the ONNX model at `path`. External data is read relative to the model's folder and only
 * from inside it. On success *out owns the graph, types inferred; on failure *out is NULL and
 * `diag` names the node (name and index) or the tensor at fault.
 */
f8_status f8_onnx_load(const char *path, f8_graph **out, f8_diag *diag);

#endif
