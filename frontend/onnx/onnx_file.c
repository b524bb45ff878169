/*
 * Reading an ONNX file as a loader that faces files from strangers must: the file's size is
 * checked before it is read, protobuf-c unpacks it through f8c's allocator, every tensor's dims,
 * dtype and data are checked against each other with overflow-checked sizes before anything is
 * allocated from them, and external data is opened only inside the model's folder, never through
 * a symbolic link or a hard link, and only where offset + length lies inside the file.
 */
#define _POSIX_C_SOURCE 200809L // openat, pread, fstat, fstatat

#include <errno.h>    // errno
#include <stdio.h>    // snprintf
#include <fcntl.h>    // openat, O_*
#include <string.h>   // memcpy, strcmp, strcspn, strlen, strrchr, strerror
#include <sys/stat.h> // fstat, fstatat, S_ISREG, S_ISLNK
#include <unistd.h>   // read, pread, close

#include "frontend/onnx/onnx_internal.h" // onnx_importer, onnx_known
#include "ir/alloc.h"                    // f8_malloc, f8_free
#include "ir/arena.h"                    // f8_arena_alloc, f8_arena_strdup
#include "ir/fp8.h"                      // f8_float_decode

/* protobuf-c allocates through f8c's hook, so tests can make any allocation fail. */
static void *pb_alloc(void *context, size_t size) {
	(void)context;
	return f8_malloc(size);
}

static void pb_free(void *context, void *pointer) {
	(void)context;
	f8_free(pointer);
}

static ProtobufCAllocator pb_allocator = {pb_alloc, pb_free, NULL};

void f8_onnx_model_free(F8cOnnx__ModelProto *model) {
	if (model)
		f8c_onnx__model_proto__free_unpacked(model, &pb_allocator);
}

static f8_status io_fail(onnx_importer *im, const char *what, const char *path) {
	return f8_diag_set(im->diag, F8_ERR_IO, "cannot %s %s: %s", what, path, strerror(errno));
}

f8_status f8_onnx_open_folder(onnx_importer *im, const char *folder) {
	if (!(im->folder = f8_arena_strdup(im->graph->arena, folder)))
		return f8_diag_set(im->diag, F8_ERR_NOMEM, "out of memory");
	im->folder_fd = open(folder, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	return im->folder_fd < 0 ? io_fail(im, "open the model's folder", folder) : F8_OK;
}

f8_status f8_onnx_model_unpack(onnx_importer *im, const uint8_t *bytes, size_t size,
			    F8cOnnx__ModelProto **out) {
	if (size > ONNX_MAX_FILE_BYTES) {
		f8_diag_set(im->diag, F8_ERR_PARSE, "%s is %zu bytes, more than an ONNX model can be "
			    "(2 GiB)", im->path, size);
		f8_diag_hint(im->diag, "models this large keep their weights in external data");
		return F8_ERR_PARSE;
	}
	*out = f8c_onnx__model_proto__unpack(&pb_allocator, size, bytes);
	if (*out)
		return F8_OK;
	// protobuf-c says no more than "malformed"; out of memory looks the same.
	f8_diag_set(im->diag, F8_ERR_PARSE, "%s is not an ONNX model: its protobuf encoding is "
		    "malformed or truncated", im->path);
	f8_diag_hint(im->diag, "check that the file was copied whole; `python3 -c \"import onnx; "
			       "onnx.checker.check_model('%s')\"` says more", im->path);
	return F8_ERR_PARSE;
}

f8_status f8_onnx_model_read(onnx_importer *im, const char *path, F8cOnnx__ModelProto **out) {
	*out = NULL;
	// The folder that holds the model is its external data's root.
	const char *slash = strrchr(path, '/');
	char *folder = slash ? f8_arena_strndup(im->graph->arena, path, (size_t)(slash - path + 1))
			     : f8_arena_strdup(im->graph->arena, "./");
	f8_status status = folder ? f8_onnx_open_folder(im, folder)
				  : f8_diag_set(im->diag, F8_ERR_NOMEM, "out of memory");
	if (status)
		return status;
	// O_NONBLOCK: a FIFO in place of the model must not hang the open; fstat refuses it.
	int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		return io_fail(im, "open", path);
	struct stat info;
	if (fstat(fd, &info) != 0) {
		status = io_fail(im, "read", path);
	} else if (!S_ISREG(info.st_mode)) {
		status = f8_diag_set(im->diag, F8_ERR_IO, "%s is not a regular file", path);
	} else if (info.st_size > ONNX_MAX_FILE_BYTES) {
		status = f8_diag_set(im->diag, F8_ERR_PARSE, "%s is %lld bytes, more than an ONNX "
				     "model can be (2 GiB)", path, (long long)info.st_size);
		f8_diag_hint(im->diag, "models this large keep their weights in external data");
	}
	size_t size = status ? 0 : (size_t)info.st_size, done = 0;
	uint8_t *bytes = status ? NULL : f8_malloc(size ? size : 1);
	if (!status && !bytes)
		status = f8_diag_set(im->diag, F8_ERR_NOMEM, "out of memory reading %s", path);
	while (!status && done < size) {
		ssize_t got = read(fd, bytes + done, size - done);
		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0)
			status = got < 0 ? io_fail(im, "read", path)
					 : f8_diag_set(im->diag, F8_ERR_IO, "%s shrank while being read", path);
		else
			done += (size_t)got;
	}
	close(fd);
	if (!status)
		status = f8_onnx_model_unpack(im, bytes, size, out);
	f8_free(bytes);
	return status;
}

/* ONNX data types: number, name, f8c dtype (UNDEFINED: f8c has none such). */
static const struct {
	int32_t number;
	const char *name;
	f8_dtype dtype;
} onnx_dtypes[] = {
	{1, "FLOAT", F8_DTYPE_F32},           {2, "UINT8", F8_DTYPE_U8},
	{3, "INT8", F8_DTYPE_I8},             {4, "UINT16", F8_DTYPE_UNDEFINED},
	{5, "INT16", F8_DTYPE_UNDEFINED},     {6, "INT32", F8_DTYPE_I32},
	{7, "INT64", F8_DTYPE_I64},           {8, "STRING", F8_DTYPE_UNDEFINED},
	{9, "BOOL", F8_DTYPE_BOOL},           {10, "FLOAT16", F8_DTYPE_F16},
	{11, "DOUBLE", F8_DTYPE_F64},         {12, "UINT32", F8_DTYPE_UNDEFINED},
	{13, "UINT64", F8_DTYPE_UNDEFINED},   {14, "COMPLEX64", F8_DTYPE_UNDEFINED},
	{15, "COMPLEX128", F8_DTYPE_UNDEFINED}, {16, "BFLOAT16", F8_DTYPE_BF16},
	{17, "FLOAT8E4M3FN", F8_DTYPE_E4M3},  {18, "FLOAT8E4M3FNUZ", F8_DTYPE_UNDEFINED},
	{19, "FLOAT8E5M2", F8_DTYPE_E5M2},    {20, "FLOAT8E5M2FNUZ", F8_DTYPE_UNDEFINED},
	{21, "UINT4", F8_DTYPE_UNDEFINED},    {22, "INT4", F8_DTYPE_UNDEFINED},
	{23, "FLOAT4E2M1", F8_DTYPE_UNDEFINED}, {24, "FLOAT8E8M0", F8_DTYPE_E8M0},
	{25, "UINT2", F8_DTYPE_UNDEFINED},    {26, "INT2", F8_DTYPE_UNDEFINED},
	{27, "FLOAT6E2M3", F8_DTYPE_UNDEFINED}, {28, "FLOAT6E3M2", F8_DTYPE_UNDEFINED},
};

bool f8_onnx_dtype(int32_t data_type, f8_dtype *out) {
	for (size_t i = 0; i < sizeof onnx_dtypes / sizeof onnx_dtypes[0]; i++) {
		if (onnx_dtypes[i].number == data_type) {
			*out = onnx_dtypes[i].dtype;
			return *out != F8_DTYPE_UNDEFINED;
		}
	}
	return false;
}

const char *f8_onnx_dtype_name(int32_t data_type) {
	for (size_t i = 0; i < sizeof onnx_dtypes / sizeof onnx_dtypes[0]; i++)
		if (onnx_dtypes[i].number == data_type)
			return onnx_dtypes[i].name;
	return "an unknown data type";
}

/* Parses a decimal uint64 (digits only, no sign, no overflow). */
static bool parse_u64(const char *text, uint64_t *out) {
	uint64_t value = 0;
	if (!text || !*text)
		return false;
	for (const char *c = text; *c; c++) {
		if (*c < '0' || *c > '9' || __builtin_mul_overflow(value, 10, &value) ||
		    __builtin_add_overflow(value, (uint64_t)(*c - '0'), &value))
			return false;
	}
	*out = value;
	return true;
}

typedef struct external_ref {
	const char *location;
	uint64_t offset, length;
	bool has_length;
} external_ref;

static f8_status tensor_fail(onnx_importer *im, const F8cOnnx__TensorProto *tensor,
			     const char *problem, const char *detail) {
	return f8_diag_set(im->diag, F8_ERR_INVALID, "tensor '%s': %s%s", tensor->name ? tensor->name
										 : "",
			   problem, detail ? detail : "");
}

static f8_status external_fields(onnx_importer *im, const F8cOnnx__TensorProto *tensor,
				 external_ref *ref) {
	*ref = (external_ref){0};
	for (size_t i = 0; i < tensor->n_external_data; i++) {
		const F8cOnnx__StringStringEntryProto *entry = tensor->external_data[i];
		const char *key = entry->key ? entry->key : "";
		if (strcmp(key, "location") == 0) {
			ref->location = entry->value;
		} else if (strcmp(key, "offset") == 0) {
			if (!parse_u64(entry->value, &ref->offset))
				return tensor_fail(im, tensor, "external data offset is not a number: ",
						   entry->value);
		} else if (strcmp(key, "length") == 0) {
			if (!parse_u64(entry->value, &ref->length))
				return tensor_fail(im, tensor, "external data length is not a number: ",
						   entry->value);
			ref->has_length = true;
		}
		// "checksum" and keys from later ONNX versions are not needed to read the data.
	}
	if (!ref->location || !*ref->location)
		return tensor_fail(im, tensor, "external data without a location", NULL);
	return F8_OK;
}

/*
 * Opens `location` below the model's folder, one component at a time, refusing absolute paths,
 * `..`, symbolic links at any component and files with more than one link. Returns the fd, or
 * -1 with the diagnostic set.
 */
static int open_external(onnx_importer *im, const F8cOnnx__TensorProto *tensor,
			 const char *location, struct stat *info) {
	if (location[0] == '/') {
		tensor_fail(im, tensor, "external data location is an absolute path: ", location);
		f8_diag_hint(im->diag, "external data must lie in the model's folder, named relative to it");
		return -1;
	}
	if (im->folder_fd < 0) {
		tensor_fail(im, tensor, "external data with no folder to read it from: ", location);
		f8_diag_hint(im->diag, "a model given in memory reads external data only when its "
				       "folder is given too");
		return -1;
	}
	char component[256];
	int fd = im->folder_fd;
	const char *c = location;
	for (;;) {
		size_t len = strcspn(c, "/");
		bool last = c[len] == '\0';
		if (len >= sizeof component) {
			tensor_fail(im, tensor, "external data location has an overlong component: ", location);
			break;
		}
		memcpy(component, c, len);
		component[len] = '\0';
		if (strcmp(component, "..") == 0) {
			tensor_fail(im, tensor, "external data location leaves the model's folder: ",
				    location);
			f8_diag_hint(im->diag, "external data must lie in the model's folder");
			break;
		}
		int next = -1;
		if (len == 0 || strcmp(component, ".") == 0) {
			if (last) {
				tensor_fail(im, tensor, "external data location names a folder: ", location);
				break;
			}
		} else {
			// O_NONBLOCK: a FIFO planted as external data must not hang the open.
			int flags = O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC |
				    (last ? 0 : O_DIRECTORY);
			next = openat(fd, component, flags);
			if (next < 0) {
				// O_NOFOLLOW | O_DIRECTORY on a link to a folder fails with ENOTDIR, not
				// ELOOP: look at the component itself to name the link.
				struct stat link;
				if (errno == ENOTDIR && fstatat(fd, component, &link, AT_SYMLINK_NOFOLLOW) == 0 &&
				    S_ISLNK(link.st_mode))
					errno = ELOOP;
				if (errno == ELOOP || errno == ENOTDIR)
					tensor_fail(im, tensor, errno == ELOOP
						    ? "external data goes through a symbolic link: "
						    : "external data location is not a path to a file: ",
						    location);
				else
					f8_diag_set(im->diag, F8_ERR_IO, "tensor '%s': cannot open external "
						    "data %s%s: %s", tensor->name ? tensor->name : "",
						    im->folder, location, strerror(errno));
				break;
			}
		}
		if (next >= 0) {
			if (fd != im->folder_fd)
				close(fd);
			fd = next;
		}
		if (last) {
			if (fstat(fd, info) != 0) {
				io_fail(im, "read external data", location);
			} else if (!S_ISREG(info->st_mode)) {
				tensor_fail(im, tensor, "external data is not a regular file: ", location);
			} else if (info->st_nlink != 1) {
				tensor_fail(im, tensor, "external data file has more than one hard link: ",
					    location);
				f8_diag_hint(im->diag, "a hard link can reach a file outside the model's "
						       "folder; copy the file instead");
			} else {
				return fd;
			}
			break;
		}
		c += len + 1;
	}
	if (fd != im->folder_fd)
		close(fd);
	return -1;
}

static bool is_external(const F8cOnnx__TensorProto *tensor) {
	return tensor->has_data_location &&
	       tensor->data_location == F8C_ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
}

/*
 * Opens a tensor's external data for reading its n_bytes: the fields parsed into *ref, the
 * length (when given) equal to n_bytes, the file opened safely (open_external), and
 * offset + n_bytes inside it. Returns the fd, or -1 with the diagnostic set.
 */
static int open_external_data(onnx_importer *im, const F8cOnnx__TensorProto *tensor,
			      uint64_t n_bytes, external_ref *ref) {
	char detail[96];
	if (external_fields(im, tensor, ref))
		return -1;
	if (ref->has_length && ref->length != n_bytes) {
		snprintf(detail, sizeof detail, "%llu bytes, but its dims and type need %llu",
			 (unsigned long long)ref->length, (unsigned long long)n_bytes);
		tensor_fail(im, tensor, "external data length is ", detail);
		return -1;
	}
	struct stat info;
	int fd = open_external(im, tensor, ref->location, &info);
	uint64_t end;
	if (fd >= 0 && (__builtin_add_overflow(ref->offset, n_bytes, &end) ||
			end > (uint64_t)info.st_size)) {
		snprintf(detail, sizeof detail, "[%llu, +%llu) of a %lld-byte file",
			 (unsigned long long)ref->offset, (unsigned long long)n_bytes,
			 (long long)info.st_size);
		tensor_fail(im, tensor, "external data lies outside its file: ", detail);
		close(fd);
		return -1;
	}
	return fd;
}

/* The number of elements the typed field for `dtype` holds, and whether the field exists. */
static size_t typed_count(const F8cOnnx__TensorProto *tensor, f8_dtype dtype) {
	switch (dtype) {
	case F8_DTYPE_F32:
		return tensor->n_float_data;
	case F8_DTYPE_F64:
		return tensor->n_double_data;
	case F8_DTYPE_I64:
		return tensor->n_int64_data;
	default: // int32_data holds every other type, one element (or its bits) per entry
		return tensor->n_int32_data;
	}
}

static size_t other_typed_count(const F8cOnnx__TensorProto *tensor, f8_dtype dtype) {
	size_t all = tensor->n_float_data + tensor->n_double_data + tensor->n_int64_data +
		     tensor->n_int32_data + tensor->n_uint64_data + tensor->n_string_data;
	return all - typed_count(tensor, dtype);
}

f8_status f8_onnx_tensor_check(onnx_importer *im, const F8cOnnx__TensorProto *tensor,
			    f8_type *type, uint64_t *n_bytes) {
	char detail[64];
	if (tensor->n_dims > F8_MAX_RANK) {
		snprintf(detail, sizeof detail, "%zu > %d", tensor->n_dims, F8_MAX_RANK);
		return tensor_fail(im, tensor, "too many dimensions: ", detail);
	}
	if (!f8_onnx_dtype(tensor->data_type, &type->dtype))
		return tensor_fail(im, tensor, "f8c does not read tensors of type ",
				   f8_onnx_dtype_name(tensor->data_type));
	if (tensor->segment)
		return tensor_fail(im, tensor, "segmented tensors are not supported", NULL);
	uint64_t count = 1, element = f8_dtype_get_info(type->dtype)->bytes;
	type->shape.rank = (uint8_t)tensor->n_dims;
	for (size_t i = 0; i < tensor->n_dims; i++) {
		if (tensor->dims[i] < 0) {
			snprintf(detail, sizeof detail, "%lld", (long long)tensor->dims[i]);
			return tensor_fail(im, tensor, "negative dimension ", detail);
		}
		if (__builtin_mul_overflow(count, (uint64_t)tensor->dims[i], &count) ||
		    count > (UINT64_C(1) << 48))
			return tensor_fail(im, tensor, "element count overflows", NULL);
		type->shape.dims[i] = f8_dim_const(tensor->dims[i]);
	}
	*n_bytes = count * element; // count < 2^48 and element <= 8: no overflow
	if (is_external(tensor)) {
		external_ref ref;
		int fd = open_external_data(im, tensor, *n_bytes, &ref);
		if (fd < 0)
			return im->diag->status;
		close(fd);
		return F8_OK;
	}
	if (tensor->has_raw_data) {
		if (other_typed_count(tensor, type->dtype) || typed_count(tensor, type->dtype))
			return tensor_fail(im, tensor, "has both raw_data and typed data", NULL);
		if (tensor->raw_data.len != *n_bytes) {
			snprintf(detail, sizeof detail, "%zu bytes, but its dims and type need %llu",
				 tensor->raw_data.len, (unsigned long long)*n_bytes);
			return tensor_fail(im, tensor, "raw_data is ", detail);
		}
		return F8_OK;
	}
	if (other_typed_count(tensor, type->dtype))
		return tensor_fail(im, tensor, "its data is in the field of another type", NULL);
	if (typed_count(tensor, type->dtype) != count) {
		snprintf(detail, sizeof detail, "%zu elements, but its dims say %llu",
			 typed_count(tensor, type->dtype), (unsigned long long)count);
		return tensor_fail(im, tensor, "has ", detail);
	}
	return F8_OK;
}

/* Fills `bytes` (n_bytes) with a checked tensor's data, little-endian, from wherever it is. */
static f8_status tensor_bytes(onnx_importer *im, const F8cOnnx__TensorProto *tensor,
			      f8_dtype dtype, uint64_t n_bytes, uint8_t *bytes) {
	if (is_external(tensor)) {
		external_ref ref;
		int fd = open_external_data(im, tensor, n_bytes, &ref);
		if (fd < 0)
			return im->diag->status;
		uint64_t done = 0;
		while (done < n_bytes) {
			ssize_t got = pread(fd, bytes + done, n_bytes - done, (off_t)(ref.offset + done));
			if (got < 0 && errno == EINTR)
				continue;
			if (got <= 0) {
				close(fd);
				return got < 0 ? io_fail(im, "read external data", ref.location)
					       : tensor_fail(im, tensor, "external data file shrank", NULL);
			}
			done += (uint64_t)got;
		}
		close(fd);
		return F8_OK;
	}
	if (tensor->has_raw_data) {
		if (n_bytes) // an empty raw_data has no pointer; memcpy must not see NULL
			memcpy(bytes, tensor->raw_data.data, n_bytes);
		return F8_OK;
	}
	// Typed fields. f8c runs on little-endian hosts, so a value's bytes are its storage.
	size_t element = f8_dtype_get_info(dtype)->bytes, count = n_bytes / (element ? element : 1);
	for (size_t i = 0; i < count; i++) {
		uint8_t *to = bytes + i * element;
		if (dtype == F8_DTYPE_F32) {
			memcpy(to, &tensor->float_data[i], 4);
		} else if (dtype == F8_DTYPE_F64) {
			memcpy(to, &tensor->double_data[i], 8);
		} else if (dtype == F8_DTYPE_I64) {
			memcpy(to, &tensor->int64_data[i], 8);
		} else {
			int32_t value = tensor->int32_data[i]; // narrow types: the low bytes hold it
			memcpy(to, &value, element);
		}
	}
	return F8_OK;
}

f8_status f8_onnx_tensor_initializer(onnx_importer *im, const F8cOnnx__TensorProto *tensor,
				  uint64_t n_bytes, const f8_initializer **out) {
	f8_initializer *init = f8_arena_alloc(im->graph->arena, sizeof *init);
	if (!init)
		return f8_diag_set(im->diag, F8_ERR_NOMEM, "out of memory");
	*init = (f8_initializer){.n_bytes = n_bytes};
	f8_onnx_dtype(tensor->data_type, &init->dtype); // checked by f8_onnx_tensor_check
	if (is_external(tensor)) {
		external_ref ref;
		f8_status status = external_fields(im, tensor, &ref);
		if (status)
			return status;
		size_t folder_len = strlen(im->folder), location_len = strlen(ref.location);
		char *path = f8_arena_alloc(im->graph->arena, folder_len + location_len + 1);
		if (!path)
			return f8_diag_set(im->diag, F8_ERR_NOMEM, "out of memory");
		memcpy(path, im->folder, folder_len);
		memcpy(path + folder_len, ref.location, location_len + 1);
		init->path = path;
		init->offset = ref.offset;
	} else {
		f8_dtype dtype = F8_DTYPE_UNDEFINED;
		f8_onnx_dtype(tensor->data_type, &dtype); // checked by f8_onnx_tensor_check
		uint8_t *data = f8_arena_alloc(im->graph->arena, n_bytes ? n_bytes : 1);
		if (!data)
			return f8_diag_set(im->diag, F8_ERR_NOMEM, "out of memory for tensor '%s'",
					   tensor->name ? tensor->name : "");
		f8_status status = tensor_bytes(im, tensor, dtype, n_bytes, data);
		if (status)
			return status;
		init->data = data;
	}
	*out = init;
	return F8_OK;
}

/* Element `i` of little-endian `bytes` of `dtype` as an integer. */
static int64_t int_element(const uint8_t *bytes, f8_dtype dtype, size_t i) {
	switch (dtype) {
	case F8_DTYPE_I64: {
		int64_t v;
		memcpy(&v, bytes + 8 * i, 8);
		return v;
	}
	case F8_DTYPE_I32: {
		int32_t v;
		memcpy(&v, bytes + 4 * i, 4);
		return v;
	}
	case F8_DTYPE_I8:
		return (int8_t)bytes[i];
	case F8_DTYPE_BOOL: // any nonzero byte is true
		return bytes[i] != 0;
	default: // U8
		return bytes[i];
	}
}

/* Element `i` of little-endian `bytes` of float `dtype` as a double. */
static double float_element(const uint8_t *bytes, f8_dtype dtype, size_t i) {
	if (dtype == F8_DTYPE_F64) {
		double v;
		memcpy(&v, bytes + 8 * i, 8);
		return v;
	}
	if (dtype == F8_DTYPE_F32) {
		float v;
		memcpy(&v, bytes + 4 * i, 4);
		return v;
	}
	size_t element = f8_dtype_get_info(dtype)->bytes;
	uint32_t bits = 0;
	memcpy(&bits, bytes + element * i, element);
	return f8_float_decode(dtype, bits);
}

f8_status f8_onnx_tensor_known(onnx_importer *im, const F8cOnnx__TensorProto *tensor,
			    const f8_type *type, onnx_known **out) {
	*out = f8_onnx_known_create(im, type->dtype, &type->shape);
	if (!*out)
		return f8_diag_set(im->diag, F8_ERR_NOMEM, "out of memory");
	uint64_t n_bytes = (uint64_t)(*out)->count * f8_dtype_get_info(type->dtype)->bytes;
	uint8_t *bytes = f8_malloc(n_bytes ? n_bytes : 1);
	if (!bytes)
		return f8_diag_set(im->diag, F8_ERR_NOMEM, "out of memory");
	f8_status status = tensor_bytes(im, tensor, type->dtype, n_bytes, bytes);
	for (uint32_t i = 0; !status && i < (*out)->count; i++) {
		if ((*out)->ints)
			(*out)->ints[i] = f8_dim_const(int_element(bytes, type->dtype, i));
		else
			(*out)->floats[i] = float_element(bytes, type->dtype, i);
	}
	f8_free(bytes);
	return status;
}
