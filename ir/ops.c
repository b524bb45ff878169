/*
 * The op info table generated from ir/ops.def, the attribute schemas it names, and attribute
 * lookups on nodes.
 */
#include "ir/ops.h" // f8_op, f8_op_info, f8_attr

#include <string.h> // strlen, memcmp, strcmp, memcpy

#include "ir/fp8.h"   // f8_float_decode, f8_float_encode
#include "ir/graph.h" // f8_node
#include "ir/infer.h" // f8_infer_*

static const char *const attr_kind_names[] = {
#define F8_ATTR_KIND_NAME(e, name) name,
	F8_ATTR_KIND_LIST(F8_ATTR_KIND_NAME)
#undef F8_ATTR_KIND_NAME
};
static_assert(sizeof attr_kind_names / sizeof attr_kind_names[0] == F8_ATTR_KIND_COUNT,
	      "one name per attribute kind");

const char *f8_attr_kind_name(f8_attr_kind kind) {
	return (unsigned)kind < F8_ATTR_KIND_COUNT ? attr_kind_names[kind] : "?";
}

/* Attribute schemas, named by the `attrs` column of ir/ops.def. Defaults are in infer_*.c. */
#define INT(name, required) {name, F8_ATTR_INT, required}
#define FLOAT(name, required) {name, F8_ATTR_FLOAT, required}
#define STRING(name, required) {name, F8_ATTR_STRING, required}
#define INTS(name, required) {name, F8_ATTR_INTS, required}
#define DTYPE(name, required) {name, F8_ATTR_DTYPE, required}
#define DIM(name, required) {name, F8_ATTR_DIM, required}
#define DIMS(name, required) {name, F8_ATTR_DIMS, required}
#define TENSOR(name, required) {name, F8_ATTR_TENSOR, required}
#define END {0} // C has no empty arrays: every schema ends with this, uncounted

static const f8_attr_spec attrs_none[] = {END};
static const f8_attr_spec attrs_identity[] = {STRING("group", false), END};
static const f8_attr_spec attrs_dropout[] = {FLOAT("ratio", false), END};
static const f8_attr_spec attrs_cast[] = {DTYPE("to", true), INT("saturate", false), END};
static const f8_attr_spec attrs_cast_like[] = {INT("saturate", false), END};
static const f8_attr_spec attrs_gemm[] = {FLOAT("alpha", false), FLOAT("beta", false),
					  INT("transA", false), INT("transB", false), END};
static const f8_attr_spec attrs_axis0[] = {INT("axis", false), END};
static const f8_attr_spec attrs_axis_last[] = {INT("axis", false), END};
static const f8_attr_spec attrs_axis_required[] = {INT("axis", true), END};
static const f8_attr_spec attrs_reshape[] = {DIMS("shape", true), INT("allowzero", false), END};
static const f8_attr_spec attrs_transpose[] = {INTS("perm", false), END};
static const f8_attr_spec attrs_axes[] = {INTS("axes", false), END};
static const f8_attr_spec attrs_axes_required[] = {INTS("axes", true), END};
static const f8_attr_spec attrs_split[] = {INT("axis", false), DIMS("split", false), END};
static const f8_attr_spec attrs_slice[] = {DIMS("starts", true), DIMS("ends", true),
					   INTS("axes", false), INTS("steps", false), END};
static const f8_attr_spec attrs_shape_required[] = {DIMS("shape", true), END};
static const f8_attr_spec attrs_constant[] = {TENSOR("value", true), END};
static const f8_attr_spec attrs_constant_of_shape[] = {DIMS("shape", true), TENSOR("value", false), END};
static const f8_attr_spec attrs_shape_slice[] = {INT("start", false), INT("end", false), END};
static const f8_attr_spec attrs_range[] = {INT("start", false), DIM("limit", true),
					   INT("delta", false), DTYPE("dtype", false), END};
static const f8_attr_spec attrs_trilu[] = {INT("upper", false), INT("k", false), END};
static const f8_attr_spec attrs_reduce[] = {INTS("axes", false), INT("keepdims", false), END};
static const f8_attr_spec attrs_gather_nd[] = {INT("batch_dims", false), END};
static const f8_attr_spec attrs_cum_sum[] = {INT("axis", true), INT("exclusive", false),
					     INT("reverse", false), END};
static const f8_attr_spec attrs_quantize_linear[] = {DTYPE("to", true), INT("axis", false),
						     INT("saturate", false), INT("block_size", false),
						     END};
static const f8_attr_spec attrs_dequantize_linear[] = {INT("axis", false), INT("block_size", false),
						       END};
static const f8_attr_spec attrs_router[] = {INT("top_k", true), STRING("score", false),
					    INT("normalize", false), END};
static const f8_attr_spec attrs_moe_dispatch[] = {INT("experts", true), END};
static const f8_attr_spec attrs_linear[] = {INT("transpose_weight", false), END};
static const f8_attr_spec attrs_norm[] = {INT("axis", false), FLOAT("epsilon", false), END};
static const f8_attr_spec attrs_attention[] = {INT("causal", false), FLOAT("scale", false), END};
static const f8_attr_spec attrs_attention_packed[] = {INT("heads", true), INT("kv_heads", false),
						      INT("causal", false), FLOAT("scale", false), END};
static const f8_attr_spec attrs_ring_attention[] = {STRING("group", true), INT("ranks", true),
						    INT("causal", false), FLOAT("scale", false),
						    END};
static const f8_attr_spec attrs_gelu[] = {STRING("approximate", false), END};
static const f8_attr_spec attrs_rope[] = {INT("interleaved", false), END};
static const f8_attr_spec attrs_cross_entropy[] = {INT("ignore_index", false),
						   STRING("reduction", false), END};
static const f8_attr_spec attrs_embedding_grad[] = {DIM("vocab", true), END};
static const f8_attr_spec attrs_embedding[] = {DIM("vocab", false), END};
static const f8_attr_spec attrs_cross_entropy_shard[] = {INT("ignore_index", false),
							 DIM("vocab", true), END};
static const f8_attr_spec attrs_gather_grad[] = {INT("axis", false), DIM("size", true), END};
static const f8_attr_spec attrs_top_k[] = {INT("k", true), INT("axis", false), INT("largest", false),
					   INT("sorted", false), END};
static const f8_attr_spec attrs_top_k_grad[] = {INT("axis", false), DIM("size", true), END};
static const f8_attr_spec attrs_slice_grad[] = {DIMS("shape", true), DIMS("starts", true),
						DIMS("ends", true), INTS("axes", false),
						INTS("steps", false), END};
static const f8_attr_spec attrs_learning_rate[] = {FLOAT("lr", true), FLOAT("min_lr", false),
						   INT("warmup", false), INT("decay_iters", false),
						   STRING("style", false), END};
static const f8_attr_spec attrs_adamw[] = {FLOAT("beta1", false), FLOAT("beta2", false),
					   FLOAT("epsilon", false), FLOAT("weight_decay", false),
					   END};
static const f8_attr_spec attrs_quantize[] = {DTYPE("to", true), INT("saturate", false),
					      INTS("block", false), DTYPE("scale_dtype", false),
					      INT("margin", false), INT("slot", false),
					      INT("grouped", false), END};
static const f8_attr_spec attrs_scale_from_amax[] = {DTYPE("format", true), INT("margin", false),
						     END};
static const f8_attr_spec attrs_dequantize[] = {DTYPE("to", true), INTS("block", false), END};
static const f8_attr_spec attrs_scaling_update[] = {DTYPE("format", true), STRING("algo", false),
						    INT("margin", false), END};
static const f8_attr_spec attrs_fp8_gemm[] = {DTYPE("to", true), STRING("gemm", true),
					      INTS("a_block", false), INTS("b_block", false), END};
static const f8_attr_spec attrs_fp8_grouped_gemm[] = {DTYPE("to", true), STRING("gemm", true),
						      END};
static const f8_attr_spec attrs_all_reduce[] = {STRING("group", true), STRING("op", false), END};
static const f8_attr_spec attrs_gather_scatter[] = {STRING("group", true), INT("axis", true),
						    INT("ranks", true), INT("balanced", false), END};
static const f8_attr_spec attrs_all_gather[] = {STRING("group", true), INT("axis", true),
						INT("ranks", true), INT("replicated", false),
						INT("balanced", false), END};
static const f8_attr_spec attrs_all_to_all[] = {STRING("group", true), INT("ranks", true), END};
static const f8_attr_spec attrs_peer[] = {STRING("group", true), INT("peer", true),
					  INT("tag", false), END};
static const f8_attr_spec attrs_recv[] = {STRING("group", true), INT("peer", true),
					  DTYPE("dtype", true), DIMS("shape", true),
					  INT("tag", false), END};

#undef INT
#undef FLOAT
#undef STRING
#undef INTS
#undef DTYPE
#undef DIM
#undef DIMS
#undef TENSOR
#undef END

#define SCHEMA_SIZE(attrs) (sizeof attrs_##attrs / sizeof attrs_##attrs[0] - 1)

static const f8_op_info op_infos[] = {
#define X(e, name, min_in, max_in, min_out, max_out, attrs, infer, flags) \
	{name, min_in, max_in, min_out, max_out, attrs_##attrs, SCHEMA_SIZE(attrs), f8_infer_##infer, flags},
#include "ir/ops.def"
#undef X
};
static_assert(sizeof op_infos / sizeof op_infos[0] == F8_OP_COUNT, "one info row per op");

const f8_op_info *f8_op_get_info(f8_op op) {
	assert((unsigned)op < F8_OP_COUNT);
	return &op_infos[op];
}

bool f8_op_from_name(const char *name, size_t len, f8_op *out) {
	for (int i = 0; i < F8_OP_COUNT; i++) {
		if (strlen(op_infos[i].name) == len && memcmp(op_infos[i].name, name, len) == 0) {
			*out = (f8_op)i;
			return true;
		}
	}
	return false;
}

const f8_attr_spec *f8_op_find_attr_spec(f8_op op, const char *name, size_t len) {
	const f8_op_info *info = f8_op_get_info(op);
	for (uint32_t i = 0; i < info->n_attrs; i++) {
		const f8_attr_spec *spec = &info->attrs[i];
		if (strlen(spec->name) == len && memcmp(spec->name, name, len) == 0)
			return spec;
	}
	return NULL;
}

bool f8_tensor_data_scalar(const f8_tensor_data *tensor, double *out) {
	size_t element = tensor ? f8_dtype_get_info(tensor->dtype)->bytes : 0;
	if (!tensor || element == 0 || tensor->n_bytes != element)
		return false;
	const uint8_t *data = tensor->data;
	switch (tensor->dtype) {
	case F8_DTYPE_F64:
		memcpy(out, data, 8);
		return true;
	case F8_DTYPE_F32: {
		float v;
		memcpy(&v, data, 4);
		*out = v;
		return true;
	}
	case F8_DTYPE_I64: {
		int64_t v;
		memcpy(&v, data, 8);
		*out = (double)v;
		return true;
	}
	case F8_DTYPE_I32: {
		int32_t v;
		memcpy(&v, data, 4);
		*out = v;
		return true;
	}
	case F8_DTYPE_BF16:
	case F8_DTYPE_F16: {
		uint16_t bits;
		memcpy(&bits, data, 2);
		*out = f8_float_decode(tensor->dtype, bits);
		return true;
	}
	default:
		return false;
	}
}

f8_tensor_data f8_tensor_data_make_scalar(f8_dtype dtype, double value, uint8_t *bytes) {
	switch (dtype) {
	case F8_DTYPE_F64:
		memcpy(bytes, &value, 8);
		break;
	case F8_DTYPE_F32: {
		float f = (float)value;
		memcpy(bytes, &f, 4);
		break;
	}
	case F8_DTYPE_I64: {
		int64_t i = (int64_t)value;
		memcpy(bytes, &i, 8);
		break;
	}
	case F8_DTYPE_I32: {
		int32_t i = (int32_t)value;
		memcpy(bytes, &i, 4);
		break;
	}
	default: { // bf16, f16
		uint16_t bits = (uint16_t)f8_float_encode(dtype, (float)value, false);
		memcpy(bytes, &bits, 2);
		break;
	}
	}
	return (f8_tensor_data){.dtype = dtype, .n_bytes = f8_dtype_get_info(dtype)->bytes,
				.data = bytes};
}

const f8_attr *f8_node_attr(const f8_node *node, const char *name) {
	for (uint32_t i = 0; i < node->n_attrs; i++)
		if (strcmp(node->attrs[i].name, name) == 0)
			return &node->attrs[i];
	return NULL;
}

uint32_t f8_node_amax(const f8_node *node) {
	if (node->op == F8_OP_QUANTIZE)
		return node->n_outputs > 2 ? node->outputs[2] : F8_NONE;
	if (node->op == F8_OP_CAST_TRANSPOSE)
		return node->n_outputs > 4 ? node->outputs[4] : F8_NONE;
	return node->op == F8_OP_AMAX ? node->outputs[0] : F8_NONE;
}

int64_t f8_node_attr_int(const f8_node *node, const char *name, int64_t fallback) {
	const f8_attr *attr = f8_node_attr(node, name);
	return attr && attr->kind == F8_ATTR_INT ? attr->i : fallback;
}

double f8_node_attr_float(const f8_node *node, const char *name, double fallback) {
	const f8_attr *attr = f8_node_attr(node, name);
	return attr && attr->kind == F8_ATTR_FLOAT ? attr->f : fallback;
}

const char *f8_node_attr_string(const f8_node *node, const char *name, const char *fallback) {
	const f8_attr *attr = f8_node_attr(node, name);
	return attr && attr->kind == F8_ATTR_STRING ? attr->s : fallback;
}

f8_dtype f8_node_attr_dtype(const f8_node *node, const char *name, f8_dtype fallback) {
	const f8_attr *attr = f8_node_attr(node, name);
	return attr && attr->kind == F8_ATTR_DTYPE ? attr->dtype : fallback;
}

int f8_cast_scale_input(const f8_node *node) {
	if (f8_node_attr_int(node, "grouped", 0))
		return f8_node_attr(node, "slot") && node->n_inputs > 1 ? 1 : -1;
	return node->n_inputs > 1 && node->inputs[1] != F8_NONE ? 1 : -1;
}

int f8_cast_counts_input(const f8_node *node) {
	if (!f8_node_attr_int(node, "grouped", 0))
		return -1;
	int after_scale = f8_cast_scale_input(node) + 1;
	int at = after_scale > 1 ? after_scale : 1;
	return (uint32_t)at < node->n_inputs ? at : -1;
}
