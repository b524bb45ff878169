/*
 * Loading a user's model into the IR, whatever form it comes in: an ONNX file (frontend/onnx/),
 * an f8c JSON model description (frontend/json/) or the text IR (ir/text.h). The result is a
 * forward graph in inference form, types inferred, ready for the pipeline.
 */
#ifndef F8_FRONTEND_H
#define F8_FRONTEND_H

#include <stdint.h> // int64_t, uint32_t

#include "ir/diag.h"  // f8_status, f8_diag
#include "ir/graph.h" // f8_graph
#include "ir/shape.h" // f8_dim_binding

typedef struct f8_frontend_options {
	const f8_dim_binding *dims; // (n_dims) sizes to bind; a name the model lacks is an error
	uint32_t n_dims;
	uint64_t seed;              // for models whose weights f8c makes up (JSON descriptions)
	int64_t vocab_multiple;     // JSON descriptions: --make-vocab-size-divisible-by; 0: the
				    // description's own (by default Megatron-LM's 128)
} f8_frontend_options;

/*
 * Loads the model at `path`, choosing the frontend by extension (.onnx, .json, else the text
 * IR), binds the given dims, and infers types. On success *out owns a verified graph (the caller
 * destroys it); on failure *out is NULL and `diag` says what and where (file:line:column for
 * JSON and text, node name and index for ONNX). `options` may be NULL.
 */
f8_status f8_frontend_load(const char *path, const f8_frontend_options *options, f8_graph **out,
			   f8_diag *diag);

/*
 * Replaces each bound symbol by its value in every leaf's type and every DIM/DIMS attribute of
 * `graph`, and clears the other values' types for inference to derive again (the caller runs
 * canonicalize). A binding whose name is not a symbol of the graph is an error (F8_ERR_ARGUMENT),
 * and so is a non-positive value.
 */
f8_status f8_frontend_bind_dims(f8_graph *graph, const f8_dim_binding *dims, uint32_t n_dims,
				f8_diag *diag);

#endif
