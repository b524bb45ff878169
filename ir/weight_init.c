/*
 * The weights f8c makes up for a model description: Megatron-LM's default initialization from a
 * small counter-based generator (splitmix64 and Box-Muller), described in ir/weight_init.h.
 */
#include <assert.h> // static_assert
#include <math.h>   // cos, log, sin, sqrt
#include <string.h> // strlen, strncmp, strcmp

#include "ir/weight_init.h" // f8_weight_init, f8_weight_init_fill

static const double PI = 3.14159265358979323846;
static const double MEGATRON_STD = 0.02; // Megatron-LM's init_method_std
static const uint64_t GOLDEN_GAMMA = 0x9E3779B97F4A7C15u;

/* splitmix64's output function (Steele, Lea, Flood 2014). */
static uint64_t splitmix64_mix(uint64_t z) {
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9u;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBu;
	return z ^ (z >> 31);
}

/* FNV-1a, 64 bits: the per-tensor part of a stream's key. */
static uint64_t fnv1a64(const char *text) {
	uint64_t hash = 0xCBF29CE484222325u;
	for (const char *c = text; *c; c++)
		hash = (hash ^ (uint8_t)*c) * 0x100000001B3u;
	return hash;
}

/* The top 53 bits of draw j of the stream `key`, as a double in [0, 1). */
static double uniform(uint64_t key, uint64_t j) {
	return (double)(splitmix64_mix(key + (j + 1) * GOLDEN_GAMMA) >> 11) * 0x1.0p-53;
}

/* The layer number of parameter name `name` ("layers.<n>."), or -1. */
static int64_t layer_of(const char *name) {
	if (strncmp(name, "layers.", 7) != 0)
		return -1;
	int64_t n = 0;
	const char *c = name + 7;
	for (; *c >= '0' && *c <= '9' && n < INT32_MAX; c++)
		n = n * 10 + (*c - '0');
	return *c == '.' && c != name + 7 ? n : -1;
}

int64_t f8_weight_init_layers(const f8_graph *graph) {
	int64_t layers = 1, held = 0;
	for (uint32_t i = 0; i < graph->n_inputs; i++) {
		int64_t n = layer_of(graph->values[graph->inputs[i]].name);
		layers = n + 1 > layers ? n + 1 : layers;
	}
	// A pipeline stage holds as many layers as every other stage (a run of them, or under the
	// interleaved schedule several): the model's are the stage's times the stages.
	int64_t stages = graph->mesh[F8_MESH_AXIS_PP];
	for (uint32_t i = 0; stages > 1 && i < graph->n_inputs; i++) {
		int64_t n = layer_of(graph->values[graph->inputs[i]].name);
		bool again = false;
		for (uint32_t j = 0; n >= 0 && j < i && !again; j++)
			again = layer_of(graph->values[graph->inputs[j]].name) == n;
		held += n >= 0 && !again;
	}
	return held ? held * stages : layers;
}

/* Whether `name` ends with `suffix`. */
static bool has_suffix(const char *name, const char *suffix) {
	size_t n = strlen(name), k = strlen(suffix);
	return n >= k && strcmp(name + n - k, suffix) == 0;
}

/* Whether `value` is read as input `index` of a node of op `op` in the program, itself or
 * through Casts and Identities: a master weight's copy in the model's dtype, --bf16's BF16 copy
 * (passes/bf16.h), or sequence parallelism's Identity {group="tp"} (passes/tensor_parallel.h)
 * is the parameter as the norm or the layer reads it. */
static bool read_as(const f8_graph *graph, f8_value_id value, f8_op op, uint32_t index) {
	for (uint32_t p = 0; p < graph->n_order; p++) {
		const f8_node *node = &graph->nodes[graph->order[p]];
		if (node->op == op && index < node->n_inputs && node->inputs[index] == value)
			return true;
		if ((node->op == F8_OP_CAST || node->op == F8_OP_IDENTITY) &&
		    node->inputs[0] == value && read_as(graph, node->outputs[0], op, index))
			return true;
	}
	return false;
}

/* Whether `value` (or its copy) is added to a GEMM's sum over ranks: a row-parallel Linear's
 * bias, which the tensor-parallel pass adds after the AllReduce or ReduceScatter. */
static bool added_to_sum(const f8_graph *graph, f8_value_id value) {
	for (uint32_t p = 0; p < graph->n_order; p++) {
		const f8_node *node = &graph->nodes[graph->order[p]];
		if (node->op == F8_OP_IDENTITY && node->inputs[0] == value &&
		    added_to_sum(graph, node->outputs[0]))
			return true;
		if (node->op != F8_OP_ADD || node->inputs[1] != value)
			continue;
		f8_node_id sum = graph->values[node->inputs[0]].producer;
		f8_op op = sum == F8_NONE ? F8_OP_ADD : graph->nodes[sum].op;
		if (op == F8_OP_ALL_REDUCE || op == F8_OP_REDUCE_SCATTER)
			return true;
	}
	return false;
}

f8_weight_init f8_weight_init_rule(const f8_graph *graph, f8_value_id value, int64_t layers) {
	const char *name = graph->values[value].name;
	if (read_as(graph, value, F8_OP_LAYER_NORM, 1) || read_as(graph, value, F8_OP_RMS_NORM, 1))
		return (f8_weight_init){.kind = F8_WEIGHT_INIT_ONES};
	if (read_as(graph, value, F8_OP_LAYER_NORM, 2) || read_as(graph, value, F8_OP_LINEAR, 2) ||
	    added_to_sum(graph, value) || has_suffix(name, ".bias"))
		return (f8_weight_init){.kind = F8_WEIGHT_INIT_ZEROS};
	// Megatron-LM's scaled_init_method_normal, for the layers writing to the residual stream.
	if (has_suffix(name, "attn.proj.weight") || has_suffix(name, "mlp.fc2.weight") ||
	    has_suffix(name, "experts.fc2.weight"))
		return (f8_weight_init){.kind = F8_WEIGHT_INIT_NORMAL,
					.std = MEGATRON_STD / sqrt(2.0 * (double)layers)};
	return (f8_weight_init){.kind = F8_WEIGHT_INIT_NORMAL, .std = MEGATRON_STD};
}

static const char *const KIND_NAMES[] = {"normal", "ones", "zeros"};
static_assert(sizeof KIND_NAMES / sizeof KIND_NAMES[0] == F8_WEIGHT_INIT_COUNT,
	      "a name for every f8_weight_init_kind");

const char *f8_weight_init_kind_name(f8_weight_init_kind kind) {
	return (unsigned)kind < F8_WEIGHT_INIT_COUNT ? KIND_NAMES[kind] : NULL;
}

bool f8_weight_init_kind_from_name(const char *name, f8_weight_init_kind *out) {
	for (int k = 0; name && k < F8_WEIGHT_INIT_COUNT; k++)
		if (strcmp(name, KIND_NAMES[k]) == 0) {
			*out = (f8_weight_init_kind)k;
			return true;
		}
	return false;
}

/* Box-Muller on pair `pair` of stream `key`: its even element into *even, its odd one into
 * *odd, each times `std` (the same operations, in the same order, whichever one is wanted). */
static void normal_pair(uint64_t key, uint64_t pair, double std, float *even, float *odd) {
	double u1 = 1.0 - uniform(key, 2 * pair), u2 = uniform(key, 2 * pair + 1);
	double radius = sqrt(-2.0 * log(u1)), angle = 2.0 * PI * u2;
	if (even)
		*even = (float)(radius * cos(angle) * std);
	if (odd)
		*odd = (float)(radius * sin(angle) * std);
}

void f8_weight_init_fill(const f8_weight_init *rule, uint64_t seed, const char *name,
			 uint64_t first, uint64_t count, float *out) {
	if (rule->kind != F8_WEIGHT_INIT_NORMAL) {
		float value = rule->kind == F8_WEIGHT_INIT_ONES ? 1.0f : 0.0f;
		for (uint64_t i = 0; i < count; i++)
			out[i] = value;
		return;
	}
	uint64_t key = splitmix64_mix(seed) ^ fnv1a64(name), end = first + count;
	// One pair's uniforms, logarithm and square root for both of its elements: half the work
	// of making each element alone, the same bits. A range may start or end inside a pair.
	uint64_t element = first;
	if (element < end && element % 2) {
		normal_pair(key, element / 2, rule->std, NULL, &out[0]);
		element++;
	}
	for (; element + 1 < end; element += 2)
		normal_pair(key, element / 2, rule->std, &out[element - first],
			    &out[element + 1 - first]);
	if (element < end)
		normal_pair(key, element / 2, rule->std, &out[element - first], NULL);
}
