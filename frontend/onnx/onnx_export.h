/*
 * Writing an IR graph (forward, high-level ops, as frontend/json builds it) as an ONNX model that
 * onnxruntime runs and that f8c's own ONNX frontend reads back and fuses to the same high-level
 * ops: standard ONNX ops of the default domain only, weights in one external data file.
 *
 * The weights are made up, deterministically from a seed, initialized as Megatron-LM does by
 * default (f8_weight_init_*). A mixture-of-experts layer is written in a dense form (every expert
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

/*
 * The weights f8c makes up for a model description, as Megatron-LM initializes them by default:
 * normal(0, 0.02) for weights and embeddings; the output projections of the residual branches
 * (attn.proj, mlp.fc2, mlp.experts.fc2) normal(0, 0.02 / sqrt(2 * layers)); the scales of norms 1
 * and every bias 0.
 */
typedef enum f8_weight_init_kind {
	F8_WEIGHT_INIT_NORMAL,
	F8_WEIGHT_INIT_ONES,
	F8_WEIGHT_INIT_ZEROS,
} f8_weight_init_kind;

typedef struct f8_weight_init {
	f8_weight_init_kind kind;
	double std; // the standard deviation of NORMAL (mean 0)
} f8_weight_init;

/* The number of layers of `graph`: one more than the largest N of a parameter named layers.N.*,
 * at least 1. */
int64_t f8_weight_init_layers(const f8_graph *graph);

/* How parameter `value` of `graph` (of a model with `layers` layers) is initialized: by what
 * reads it (a norm's scale, a bias) and by its name (the output projections). */
f8_weight_init f8_weight_init_rule(const f8_graph *graph, f8_value_id value, int64_t layers);

/*
 * Elements [first, first + count) of the parameter called `name`, initialized by `rule` from
 * `seed`, into `out` (count floats). The random numbers are counter-based, so any range can be
 * made alone and the result does not depend on how a tensor is cut into ranges: element i is
 * from the pair p = i / 2 of uniforms u1 = U(2p), u2 = U(2p + 1), where U(j) takes the top 53
 * bits of splitmix64's output function of key + (j + 1) * 0x9E3779B97F4A7C15, key =
 * splitmix64(seed) XOR FNV-1a-64(name); Box-Muller gives sqrt(-2 ln u1) * cos(2 pi u2) for even
 * i and * sin(2 pi u2) for odd i (u1 in (0, 1], u2 in [0, 1)), in double precision, times the
 * rule's std, rounded to float. The same seed and name give the same numbers wherever libm's log,
 * cos and sin agree (they may differ in the last bit between C libraries), and different names
 * independent streams, so adding a layer does not change the other layers' weights.
 */
void f8_weight_init_fill(const f8_weight_init *rule, uint64_t seed, const char *name,
			 uint64_t first, uint64_t count, float *out);

#endif
