/*
 * The weights f8c makes up for a model description (one without weights of its own), from a
 * seed, as Megatron-LM initializes them by default. Both sides use this one rule: the ONNX
 * exporter writes these weights into a model file, and the compile driver makes a plan's
 * initial weights with it (runtime/parameters.h), so the two agree bit for bit.
 */
#ifndef F8_IR_WEIGHT_INIT_H
#define F8_IR_WEIGHT_INIT_H

#include <stdbool.h> // bool
#include <stdint.h>  // uint64_t, int64_t

#include "ir/graph.h" // f8_graph, f8_value_id

/*
 * The rule, as Megatron-LM initializes by default:
 * normal(0, 0.02) for weights and embeddings; the output projections of the residual branches
 * (attn.proj, mlp.fc2, mlp.experts.fc2) normal(0, 0.02 / sqrt(2 * layers)); the scales of norms 1
 * and every bias 0.
 */
typedef enum f8_weight_init_kind {
	F8_WEIGHT_INIT_NORMAL,
	F8_WEIGHT_INIT_ONES,
	F8_WEIGHT_INIT_ZEROS,
	F8_WEIGHT_INIT_COUNT
} f8_weight_init_kind;

/* The rule's name and version, as a plan that makes its weights from a seed records them
 * (runtime/plan.h): a change to the generator, to f8_weight_init_rule's choices or to the
 * numbers below changes the version, so that an old record is refused rather than read as
 * other weights. */
#define F8_WEIGHT_INIT_RULE_NAME "megatron-lm-default"
#define F8_WEIGHT_INIT_RULE_VERSION 1

typedef struct f8_weight_init {
	f8_weight_init_kind kind;
	double std; // the standard deviation of NORMAL (mean 0)
} f8_weight_init;

/* "normal", "ones", "zeros"; NULL for a kind out of range. */
const char *f8_weight_init_kind_name(f8_weight_init_kind kind);

/* The kind named `name` into *out; false for a name that is none. */
bool f8_weight_init_kind_from_name(const char *name, f8_weight_init_kind *out);

/* The number of layers of `graph`: one more than the largest N of a parameter named layers.N.*,
 * at least 1; of a pipeline stage's (graph->mesh's PP above 1), its run of layers times the
 * stages: the whole model's, as every stage's weights are made for. */
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
