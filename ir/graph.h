/*
 * The IR graph: SSA values, nodes, attributes, and the per-value annotations that the passes
 * fill in (precision, placements on the device mesh, buffer offset, recompute).
 *
 * Ownership: a graph owns everything reachable from it. Names, attribute payloads and node
 * operand lists live in the graph's arena; the value and node tables grow by reallocation, so
 * objects are referred to by u32 ids, never by pointers kept across an insertion. The program
 * is the `order` list of node ids: a pass that inserts or removes nodes rewrites that list,
 * and removed nodes simply drop out of it.
 */
#ifndef F8_IR_GRAPH_H
#define F8_IR_GRAPH_H

#include <stdbool.h> // bool
#include <stddef.h>  // size_t
#include <stdint.h>  // uint32_t, int64_t

#include "ir/arena.h" // f8_arena
#include "ir/diag.h"  // f8_status, f8_diag
#include "ir/ops.h"   // f8_op, f8_attr, f8_attr_kind
#include "ir/shape.h" // f8_type, f8_shape, f8_dim

typedef uint32_t f8_value_id;
typedef uint32_t f8_node_id;
#define F8_NONE UINT32_MAX // no value, no node, no slot

/* X(ENUM, text name, is a leaf role): what a value is for. Leaves are the graph's inputs.
 * A buffer is a weight that is not trained (PyTorch's buffers: rotary frequencies, masks). */
#define F8_ROLE_LIST(X)                         \
	X(INPUT, "input", true)                 \
	X(PARAMETER, "param", true)             \
	X(BUFFER, "buffer", true)               \
	X(ACTIVATION, "act", false)             \
	X(GRADIENT, "grad", false)              \
	X(OPTIMIZER_STATE, "state", true)       \
	X(SCALE, "scale", true)                 \
	X(AMAX_HISTORY, "amax_history", true)   \
	X(WEIGHT_CACHE, "cache", true)

typedef enum f8_role {
#define F8_ROLE_ENUM(e, name, leaf) F8_ROLE_##e,
	F8_ROLE_LIST(F8_ROLE_ENUM)
#undef F8_ROLE_ENUM
	F8_ROLE_COUNT
} f8_role;

/* X(ENUM, text name): which part of a training step a node belongs to. A step runs cast once,
 * then fwd|bwd once per micro-batch, then opt once. cast holds what is made once per optimizer
 * step and read by every micro-batch: the FP8 copies of the weights (TransformerEngine makes
 * them on the first micro-batch). FWD stays first, so that a new node is a forward node. */
#define F8_PHASE_LIST(X) \
	X(FWD, "fwd")    \
	X(BWD, "bwd")    \
	X(OPT, "opt")    \
	X(CAST, "cast")

typedef enum f8_phase {
#define F8_PHASE_ENUM(e, name) F8_PHASE_##e,
	F8_PHASE_LIST(F8_PHASE_ENUM)
#undef F8_PHASE_ENUM
	F8_PHASE_COUNT
} f8_phase;

/* X(ENUM, text name): FP8 scaling recipes (DESIGN.md, "FP8 conventions"). */
#define F8_RECIPE_LIST(X)        \
	X(NONE, "none")          \
	X(DELAYED, "delayed")    \
	X(CURRENT, "current")    \
	X(ROWWISE, "rowwise")    \
	X(BLOCK, "block")        \
	X(MXFP8, "mxfp8")        \
	X(MODEL, "model") /* the model's own scales (ONNX QuantizeLinear / DequantizeLinear) */

typedef enum f8_recipe {
#define F8_RECIPE_ENUM(e, name) F8_RECIPE_##e,
	F8_RECIPE_LIST(F8_RECIPE_ENUM)
#undef F8_RECIPE_ENUM
	F8_RECIPE_COUNT
} f8_recipe;

/* X(ENUM, text name): axes of the device mesh, innermost first (DESIGN.md, "Distributed"). */
#define F8_MESH_AXIS_LIST(X) \
	X(TP, "tp")          \
	X(CP, "cp")          \
	X(EP, "ep")          \
	X(DP, "dp")          \
	X(PP, "pp")

typedef enum f8_mesh_axis {
#define F8_MESH_AXIS_ENUM(e, name) F8_MESH_AXIS_##e,
	F8_MESH_AXIS_LIST(F8_MESH_AXIS_ENUM)
#undef F8_MESH_AXIS_ENUM
	F8_MESH_AXIS_COUNT
} f8_mesh_axis;

/* X(ENUM, text name): the reductions a partial value awaits: gradients are summed, amaxes
 * (DESIGN.md, "Distributed") are maxed. */
#define F8_REDUCTION_LIST(X) \
	X(SUM, "sum")        \
	X(MAX, "max")

typedef enum f8_reduction {
#define F8_REDUCTION_ENUM(e, name) F8_REDUCTION_##e,
	F8_REDUCTION_LIST(F8_REDUCTION_ENUM)
#undef F8_REDUCTION_ENUM
	F8_REDUCTION_COUNT
} f8_reduction;

/* X(ENUM, text name): how a value lies along one mesh axis, as PyTorch's DTensor says it: every
 * rank of the axis holds all of it, or a slice of one dimension, or a term of a reduction not
 * done yet. The text IR's annotations are keyed by the names (`shard=`, `partial=`; replicated,
 * the default, is not written). REPLICATED stays first, so that a zeroed placement is it. TIED
 * (`tied=pp`) is a parameter held whole by the axis's first and last ranks only, its gradient
 * summed between them: the embedding table a GPT's first pipeline stage looks tokens up in and
 * its last stage's head reads (Megatron-LM's embedding group). */
#define F8_PLACEMENT_KIND_LIST(X)        \
	X(REPLICATED, "replicated")      \
	X(SHARD, "shard")                \
	X(PARTIAL, "partial")            \
	X(TIED, "tied")

typedef enum f8_placement_kind {
#define F8_PLACEMENT_KIND_ENUM(e, name) F8_PLACEMENT_KIND_##e,
	F8_PLACEMENT_KIND_LIST(F8_PLACEMENT_KIND_ENUM)
#undef F8_PLACEMENT_KIND_ENUM
	F8_PLACEMENT_KIND_COUNT
} f8_placement_kind;

/* X(ENUM, text name): the kernel families the fuse pass groups nodes into (passes/fuse.c says
 * which nodes each may hold); codegen/ lowers each family's groups to kernel IR. */
#define F8_KERNEL_FAMILY_LIST(X)                 \
	X(CAST, "cast")                          \
	X(NORM, "norm")                          \
	X(NORM_GRAD, "norm_grad")                \
	X(ACTIVATION, "activation")              \
	X(ACTIVATION_GRAD, "activation_grad")    \
	X(ELEMENTWISE, "elementwise")            \
	X(CROSS_ENTROPY, "cross_entropy")        \
	X(OPTIMIZER, "optimizer")                \
	X(EMBEDDING, "embedding")                \
	X(EMBEDDING_GRAD, "embedding_grad")      \
	X(SCALING, "scaling")                    \
	X(LAYOUT, "layout")                      \
	X(REDUCE, "reduce")                      \
	X(FILL, "fill")                          \
	X(GLOBAL_NORM, "global_norm")            \
	X(LEARNING_RATE, "learning_rate")        \
	X(ROPE, "rope")                          \
	X(SOFTMAX, "softmax")                    \
	X(MOE, "moe")

typedef enum f8_kernel_family {
#define F8_KERNEL_FAMILY_ENUM(e, name) F8_KERNEL_FAMILY_##e,
	F8_KERNEL_FAMILY_LIST(F8_KERNEL_FAMILY_ENUM)
#undef F8_KERNEL_FAMILY_ENUM
	F8_KERNEL_FAMILY_COUNT
} f8_kernel_family;

const char *f8_role_name(f8_role role);
bool f8_role_is_leaf(f8_role role);
const char *f8_phase_name(f8_phase phase);
const char *f8_recipe_name(f8_recipe recipe);
const char *f8_mesh_axis_name(f8_mesh_axis axis);
const char *f8_reduction_name(f8_reduction reduction);
const char *f8_placement_kind_name(f8_placement_kind kind);
const char *f8_kernel_family_name(f8_kernel_family family);

/* Lookups by text name (`len` bytes at `name`); true and *out set when found. */
bool f8_role_from_name(const char *name, size_t len, f8_role *out);
bool f8_phase_from_name(const char *name, size_t len, f8_phase *out);
bool f8_recipe_from_name(const char *name, size_t len, f8_recipe *out);
bool f8_mesh_axis_from_name(const char *name, size_t len, f8_mesh_axis *out);
bool f8_reduction_from_name(const char *name, size_t len, f8_reduction *out);
bool f8_placement_kind_from_name(const char *name, size_t len, f8_placement_kind *out);
bool f8_kernel_family_from_name(const char *name, size_t len, f8_kernel_family *out);

/* The precision decision for a value, filled by the precision and fp8-cast passes. */
typedef struct f8_precision {
	f8_dtype format;       // the format it is cast to; UNDEFINED while undecided
	f8_recipe recipe;      // how its scale is found
	uint32_t scaling_slot; // its slot in the step's scaling state, F8_NONE when it has none
	const char *reason;    // why, in words ("fwd input of layers.3.mlp.fc1, HYBRID -> E4M3")
} f8_precision;

/*
 * How a value lies along one mesh axis, filled by the shard pass. One kind per axis, so that an
 * axis cannot both split a value and hold partial terms of it. A value has one placement per
 * axis (f8_value.placement): TP on dim 1 and ZeRO's DP on dim 0, say, or partial over TP and
 * split over SP's CP. Several axes may split one dimension; they split it in mesh order (TP
 * first, and each later axis splits the slices of the one before, as Megatron's distributed
 * optimizer splits a TP shard over DP). A zeroed placement is replicated.
 */
enum { F8_MAX_PLACEMENT_PARTS = 16 };

typedef struct f8_placement {
	f8_placement_kind kind;
	union {
		struct {
			uint8_t dim;     // SHARD: the tensor dimension split, below the value's rank
			uint8_t n_parts; // SHARD: 0 or 1: the dimension split as one; else parts[]
		};
		f8_reduction reduction; // PARTIAL: how the ranks' terms combine into the value
	};
	/* SHARD with n_parts > 1: the dimension is n_parts blocks of these sizes (in the tensor
	 * the axis splits, before the split), and each block is split over the axis on its own:
	 * a rank holds its slice of every block, in block order. A fused QKV weight [q; k; v] is
	 * split so, each rank holding its heads' rows of q, k and v, where Megatron-LM interleaves
	 * the heads in the weight instead. In the graph's arena. */
	const int64_t *parts;
} f8_placement;

/*
 * Where a parameter's initial contents come from: the weights of the model file it was imported
 * from. Data is little-endian, row-major, of `dtype` (the value's dtype at import; the training
 * pass may make the value an f32 master weight since); n_bytes matches the value's shape. The
 * frontend has checked that the bytes exist (inside the model's folder, in a regular file).
 */
typedef struct f8_initializer {
	f8_dtype dtype;    // the element type of the data
	const char *path;  // the file holding the data (ONNX external data), or NULL when inline
	uint64_t offset;   // byte offset of the data in `path`
	uint64_t n_bytes;
	const void *data;  // (n_bytes) the data when inline, owned by the graph's arena; else NULL
} f8_initializer;

/* Reads the first `n_bytes` (at most init->n_bytes) of `init`'s data into `out`, as they are:
 * in init->dtype, unconverted (ir/initializer.c). `name` is the value's, for the messages.
 * F8_ERR_IO when the external data file cannot be opened or ends early. */
f8_status f8_initializer_read(const f8_initializer *init, uint64_t n_bytes, void *out,
			      const char *name, f8_diag *diag);

typedef struct f8_value {
	const char *name;      // unique within the graph, without the '%'
	f8_type type;          // dtype UNDEFINED until shape inference has run
	f8_role role;
	f8_node_id producer;   // F8_NONE for leaves (graph inputs, parameters, state)
	uint32_t output_index; // which output of `producer`
	// Annotations, left at their "none" values until the pass that decides them.
	f8_precision precision;
	f8_placement placement[F8_MESH_AXIS_COUNT]; // by f8_mesh_axis; zeroed: replicated
	int64_t buffer_offset; // byte offset in the step's slab, -1 while unplanned
	bool recompute;        // dropped after the forward and recomputed in the backward
	const f8_initializer *initializer; // initial contents of a parameter, or NULL
} f8_value;

/* Where a node came from in the user's model. */
typedef struct f8_location {
	const char *file;   // model file, NULL when unknown
	uint32_t line;      // 1-based line and column in a text model (JSON, text IR), 0 when none
	uint32_t column;
	uint32_t index;     // node index in an ONNX graph, F8_NONE when none
} f8_location;

typedef struct f8_node {
	f8_op op;
	uint32_t n_inputs, n_outputs, n_attrs;
	f8_value_id *inputs;  // (n_inputs) F8_NONE marks an omitted optional input
	f8_value_id *outputs; // (n_outputs)
	f8_attr *attrs;       // (n_attrs) in the order of the op's attribute schema
	const char *scope;    // "layers.3.mlp.fc1", or NULL
	const char *name;     // the node's name in the source model ("MatMul_7"), or NULL
	f8_phase phase;
	uint32_t group;       // its fused kernel: an index into graph->groups, F8_NONE: none
	f8_location location;
	uint32_t text_line;   // the line of the text IR it was parsed from, for messages; 0 if none
	// Why this backward node recomputes a forward node (the recompute pass: "full recompute
	// of layers 0-1 (uniform, 2 layers a unit) ..."); NULL for every other node.
	const char *recompute;
} f8_node;

/*
 * State a step carries to the next: when the phases of the program that produce `source` have
 * run, leaf `target` takes its contents (AdamW's new parameter, a moment, a gradient
 * accumulator, the step counter). A leaf may be updated once per phase (an accumulator: added
 * to in bwd, zeroed in opt); when one run makes several sources of a leaf, they apply in the
 * order of the list. Text form: `update %target <- %source`.
 */
typedef struct f8_update {
	f8_value_id target; // a leaf: param, state, scale, amax_history
	f8_value_id source; // produced by a node, of the target's type
} f8_update;

/*
 * A fused kernel: nodes the fuse pass made one kernel of (DESIGN.md: "fuse"). Its members are
 * the nodes whose `group` is its index; they are contiguous in the program order and of one
 * phase, so that a backend runs the group where its first member stands. Values produced and
 * read only inside the group never reach memory. Text form: a line `kernel NAME : FAMILY
 * "reason"` before the first member, and `kernel=NAME` on each member.
 */
typedef struct f8_kernel_group {
	const char *name;        // unique in the graph ("k3"), a C identifier
	f8_kernel_family family;
	const char *reason;      // why these nodes are one kernel, in words
} f8_kernel_group;

typedef struct f8_graph {
	f8_arena *arena;
	const char *name;
	const char *text_file; // the text IR file it was parsed from, for messages; NULL if none
	f8_value *values; // (n_values) every value ever created
	f8_node *nodes;   // (n_nodes) every node ever created
	uint32_t n_values, n_nodes;
	f8_node_id *order; // (n_order) the program: nodes in execution order
	uint32_t n_order;
	f8_value_id *inputs; // (n_inputs) leaves in declaration order
	uint32_t n_inputs;
	f8_value_id *outputs; // (n_outputs) the graph's results
	uint32_t n_outputs;
	f8_update *updates; // (n_updates) state the step carries to the next
	uint32_t n_updates;
	const char **symbols; // (n_symbols) names of symbolic dimensions, by id
	uint32_t n_symbols;
	f8_kernel_group *groups; // (n_groups) the fused kernels, by index
	uint32_t n_groups;
	// The device mesh the program runs on, ranks along each axis (the shard pass's; 0: one
	// rank, as 1). Every rank runs this program; f8_mesh_coordinates says where it stands.
	uint32_t mesh[F8_MESH_AXIS_COUNT];
	// Private: capacities and the name index.
	uint32_t cap_values, cap_nodes, cap_order, cap_inputs, cap_outputs, cap_symbols, cap_updates,
		 cap_groups;
	uint32_t *name_index; // open addressing over value ids, F8_NONE = empty
	uint32_t name_index_cap;
} f8_graph;

/* Creates an empty graph called `name` (copied). Returns F8_ERR_NOMEM on failure, *out NULL. */
f8_status f8_graph_create(const char *name, f8_graph **out);

/* Frees the graph and everything it owns. NULL is allowed. */
void f8_graph_destroy(f8_graph *graph);

/* Interns the symbol `name` (`len` bytes) and returns its id in *out. F8_ERR_INVALID past
 * 65536 symbols, F8_ERR_NOMEM when out of memory. */
f8_status f8_graph_intern_symbol(f8_graph *graph, const char *name, size_t len, uint16_t *out);

/*
 * Adds a leaf: a graph input of role `role` (a leaf role), named `name` (copied; NULL picks a
 * fresh name), of type `type`. Fails with F8_ERR_INVALID when the name is taken.
 */
f8_status f8_graph_add_input(f8_graph *graph, const char *name, f8_role role, const f8_type *type,
			     f8_value_id *out, f8_diag *diag);

/*
 * Adds a node of `op` reading `inputs` (n_inputs ids, F8_NONE for an omitted optional input)
 * and producing `n_outputs` fresh values of role ACTIVATION and undefined type, named from
 * `output_names` (copied; NULL, or a NULL entry, picks fresh names). The node is appended to the
 * program order and gets no attributes (f8_node_set_attrs). Arity is checked by the verifier,
 * not here, so that a parser can build a bad node and have it reported with its place.
 */
f8_status f8_graph_add_node(f8_graph *graph, f8_op op, const f8_value_id *inputs,
			    uint32_t n_inputs, uint32_t n_outputs, const char *const *output_names,
			    f8_node_id *out, f8_diag *diag);

/* Copies `attrs` (n_attrs; payloads are copied into the arena) onto the node, replacing any. */
f8_status f8_node_set_attrs(f8_graph *graph, f8_node_id node, const f8_attr *attrs,
			    uint32_t n_attrs);

/* Appends `value` to the graph's outputs. */
f8_status f8_graph_add_output(f8_graph *graph, f8_value_id value);

/* Declares that leaf `target` takes the contents of `source` at the end of a step. The verifier
 * checks the pair (a leaf of a state-like role, one update each, the same type). */
f8_status f8_graph_add_update(f8_graph *graph, f8_value_id target, f8_value_id source);

/* Adds a fused kernel of `family` named `name` and explaining itself by `reason` (both copied);
 * its index into *out. Nodes join it by setting their `group`. F8_ERR_INVALID when the name is
 * taken, F8_ERR_NOMEM when memory runs out. */
f8_status f8_graph_add_group(f8_graph *graph, const char *name, f8_kernel_family family,
			     const char *reason, uint32_t *out, f8_diag *diag);

/* The fused kernel named `name` (`len` bytes), or F8_NONE. */
uint32_t f8_graph_find_group(const f8_graph *graph, const char *name, size_t len);

/* The value named `name` (`len` bytes), or F8_NONE. */
f8_value_id f8_graph_find_value(const f8_graph *graph, const char *name, size_t len);

/*
 * Replaces the program order with `order` (n ids, copied). Nodes left out are removed from the
 * program; their values stay in the table but nothing may read them (the verifier checks).
 */
f8_status f8_graph_set_order(f8_graph *graph, const f8_node_id *order, uint32_t n);

/* Node lookup helpers; ids must be in range. */
static inline f8_value *f8_graph_value(const f8_graph *graph, f8_value_id id) {
	return &graph->values[id];
}
static inline f8_node *f8_graph_node(const f8_graph *graph, f8_node_id id) {
	return &graph->nodes[id];
}

/*
 * Describes node `id` for messages: `node 3 (%y = MatMul, "layers.0.fc1")`, into `buffer`.
 * Returns `buffer`.
 */
const char *f8_graph_describe_node(const f8_graph *graph, f8_node_id id, char *buffer,
				   size_t size);

/* Sets diag->node to the description of node `id` (for errors about a node). */
void f8_diag_set_node(f8_diag *diag, const f8_graph *graph, f8_node_id id);

/* Ranks along mesh axis `axis` of the graph's mesh (1 when unset). */
static inline uint32_t f8_graph_mesh_size(const f8_graph *graph, f8_mesh_axis axis) {
	return graph->mesh[axis] ? graph->mesh[axis] : 1;
}

/* Ranks in the whole mesh: the product of its axes. */
uint64_t f8_graph_mesh_ranks(const f8_graph *graph);

/*
 * A collective's group: the mesh axes it spans, as a mask of bits 1 << f8_mesh_axis. Its text
 * name is the axes joined by '+' in mesh order ("dp", "tp+dp", "tp+cp+dp": the ranks that differ
 * only along those axes form one group). f8_mesh_group_from_name reads `len` bytes at `name`
 * and is false for anything else (an empty name, an unknown or repeated axis);
 * f8_mesh_group_name writes the name into `buffer` and returns it.
 */
bool f8_mesh_group_from_name(const char *name, size_t len, uint32_t *axes);
const char *f8_mesh_group_name(uint32_t axes, char *buffer, size_t size);

/*
 * The coordinates of rank `rank` on a mesh of `sizes` (each >= 1): the innermost axis (TP)
 * varies fastest, as Megatron-LM orders tp-cp-ep-dp-pp, so that rank = tp + TP * (cp + CP *
 * (ep + EP * (dp + DP * pp))).
 */
void f8_mesh_coordinates(const uint32_t *sizes, uint64_t rank, uint32_t *coordinates);

/*
 * The index of the transformer layer a scope names ("layers.3.mlp.fc1", "model.layers.3...",
 * "transformer.h.3.attn", "blocks.3.fc1", "/model/layers.3/..."), or -1 (NULL too). When
 * `module` is not NULL it gets what follows the index and its separator ("mlp.fc1"; "" for
 * the layer's own scope "layers.3").
 */
int f8_scope_layer(const char *scope, const char **module);

#endif
