/*
 * Writing an IR graph (forward, high-level ops, as frontend/json builds it) as an ONNX model that
 * onnxruntime runs and that f8c's own ONNX frontend reads back and fuses to the same high-level
 * ops: standard ONNX ops of the default domain only, weights in one external data file.
 *
 * The weights are made up, deterministically from a seed, initialized as Megatron-LM does by
 * default (ir/weight_init.h). A mixture-of-experts layer is written in a dense form (every expert
 * on every token, weighted by the router's renormalized top-k probabilities and zero elsewhere),
 * which costs experts / top_k times the FLOPs of the routed layer; ONNX has no standard op for
 * routing that would keep the shapes static.
 */
#ifndef F8_FRONTEND_ONNX_ONNX_EXPORT_H
#define F8_FRONTEND_ONNX_ONNX_EXPORT_H

#include <signal.h> // sig_atomic_t
#include <stdint.h> // uint64_t, int64_t

#include "ir/diag.h"  // f8_status, f8_diag
#include "ir/graph.h" // f8_graph, f8_value_id
#include "ir/weight_init.h" // f8_weight_init: the rule the exporter writes weights by

enum {
	F8_ONNX_EXPORT_OPSET_DEFAULT = 18,
	F8_ONNX_EXPORT_OPSET_MIN = 17,     // LayerNormalization
	F8_ONNX_EXPORT_OPSET_MAX = 24,     // the newest f8c's ONNX frontend reads
	F8_ONNX_EXPORT_SEED_DEFAULT = 1234,
	F8_ONNX_EXPORT_ALIGN = 64,         // byte alignment of each tensor in the external data
};

typedef struct f8_onnx_export_options {
	uint64_t seed;                // the weights' seed
	int opset;                    // the default domain's opset, in [OPSET_MIN, OPSET_MAX]
	const char *producer_version; // the f8c version to write as producer_version, or NULL
	// When set (by a signal handler), the writer stops soon, as after any failure; may be NULL.
	const volatile sig_atomic_t *interrupted;
} f8_onnx_export_options;

/*
 * Writes `graph` as the ONNX model `path` and its weights as `path`.data next to it (named by its
 * bare file name, so the pair moves together). Both files are written to temporary files in the
 * same folder, synced and renamed into place: on any failure neither `path` nor `path`.data is
 * left changed or half-written. `options` may be NULL (seed 1234, opset 18).
 *
 * The graph must be a forward graph with types inferred whose leaves are inputs and parameters
 * without initial contents (what frontend/json builds). Fails with F8_ERR_ARGUMENT when the
 * folder of `path` does not exist or `options` are out of range, F8_ERR_UNSUPPORTED naming the
 * node for an op or a form the writer has no ONNX form for, F8_ERR_IO when a file cannot be
 * written (or the folder lacks the room for the weights, or `interrupted` was set), F8_ERR_NOMEM
 * when out of memory.
 */
f8_status f8_onnx_export(const f8_graph *graph, const char *path,
			 const f8_onnx_export_options *options, f8_diag *diag);

#endif
