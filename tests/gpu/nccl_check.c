/*
 * The CUDA backend's NCCL communicators (runtime/cuda/nccl.h) on the one GPU a machine lends:
 * what one rank can check of them. The world's communicator and a split for every group of mesh
 * axes (31 splits); on fresh random data of every dtype NCCL reduces, AllReduce (sum and max),
 * AllGather and ReduceScatter, each over a group of one rank, give back their input to the bit;
 * a send to this rank and its receive, grouped, move their bytes; an AllReduce captured in a
 * CUDA graph and replayed does too; f8_nccl_synchronize waits for the stream; a group without a
 * communicator and a dtype NCCL cannot reduce are refused with their messages. The collectives'
 * layouts over several ranks (parts, packing, balanced chunks) are held to the CPU's by
 * runtime.part_runs, and the collective nodes through the backend with F8C_NCCL=1 by
 * backend_ops_cuda (tools/gpu_checks.sh).
 *
 * Exit status: 0 when every check passed; 1 otherwise; 77, saying why, without a GPU or NCCL.
 */
#include <stdint.h> // uint8_t, uint32_t
#include <stdio.h>  // printf
#include <stdlib.h> // rand, srand
#include <string.h> // memcmp, memset
#include <time.h>   // time

#include "runtime/cuda/driver.h"    // f8_cuda_open, f8_cuda_alloc, f8_cuda_copy_*
#include "runtime/cuda/libraries.h" // f8_cuda_load
#include "runtime/cuda/nccl.h"      // f8_nccl_*
#include "tests/test_support.h"     // CHECK, test_finish

enum { BYTES = 3 * 1024 * 1024 + 40 };

static uint8_t sent[BYTES], got[BYTES];

static void fill(void) {
	for (size_t i = 0; i < BYTES; i++)
		sent[i] = (uint8_t)rand();
	// Finite floats of every width: the top exponent bit of every odd byte cleared, which is
	// each element's high byte in bf16, f16, f32 and f64 alike (a NaN's bits may not survive).
	for (size_t i = 1; i < BYTES; i += 2)
		sent[i] &= 0xBF;
}

/* After a collective queued with `status`: waits, and checks `out` holds the `bytes` sent. */
static void round_trip(const char *what, CUstream stream, CUdeviceptr out, size_t bytes,
		       f8_status status, f8_diag *diag) {
	if (!status)
		status = f8_cuda_stream_synchronize(stream, diag);
	if (!status)
		status = f8_cuda_copy_to_host(got, out, bytes, diag);
	bool same = !status && memcmp(got, sent, bytes) == 0;
	printf("%-40s %s%s%s\n", what, same ? "ok" : "FAILED", status ? ": " : "",
	       status ? diag->message : "");
	CHECK(same);
}

int main(void) {
	unsigned seed = (unsigned)time(NULL);
	srand(seed);
	printf("seed %u\n", seed);
	f8_diag diag = {0};
	f8_cuda_device device;
	f8_status status = f8_cuda_open(&device, &diag);
	if (status == F8_ERR_UNSUPPORTED) {
		printf("SKIPPED: this check needs a GPU: %s\n", diag.message);
		return 77;
	}
	CUstream stream = NULL;
	if (!status)
		status = f8_cuda_stream_create(&stream, &diag);
	f8_nccl *nccl = NULL;
	uint32_t groups = 0;
	for (uint32_t axes = 1; axes < F8_DIST_GROUPS; axes++)
		groups |= 1u << axes;
	if (!status) {
		status = f8_nccl_create(NULL, groups, &nccl, &diag);
		if (status == F8_ERR_UNSUPPORTED) {
			printf("SKIPPED: NCCL: %s\n", diag.message);
			f8_cuda_stream_destroy(stream);
			f8_cuda_close(&device);
			return 77;
		}
	}
	printf("%s: the world and %u groups' communicators: %s\n", device.name, F8_DIST_GROUPS - 1,
	       status ? diag.message : "made");
	CHECK(!status);
	bool all = true;
	for (uint32_t axes = 1; !status && axes < F8_DIST_GROUPS; axes++)
		all &= f8_nccl_has(nccl, axes);
	CHECK(all);
	CUdeviceptr in = 0, out = 0;
	if (!status)
		status = f8_cuda_alloc(BYTES, &in, &diag);
	if (!status)
		status = f8_cuda_alloc(BYTES, &out, &diag);
	struct {
		f8_dtype dtype;
		size_t bytes;
	} types[] = {{F8_DTYPE_F32, 4}, {F8_DTYPE_BF16, 2}, {F8_DTYPE_F16, 2}, {F8_DTYPE_F64, 8},
		     {F8_DTYPE_I64, 8},  {F8_DTYPE_I32, 4},  {F8_DTYPE_U8, 1}};
	uint32_t tp = 1u << F8_MESH_AXIS_TP, dp = 1u << F8_MESH_AXIS_DP;
	uint32_t tp_dp = tp | dp;
	for (size_t t = 0; !status && t < sizeof types / sizeof *types; t++) {
		size_t count = (BYTES - 40) / types[t].bytes;
		for (int max = 0; max < 2; max++) {
			if (max && types[t].dtype != F8_DTYPE_F32 && types[t].dtype != F8_DTYPE_F64)
				continue; // random bits of the narrow floats may be NaNs
			fill();
			char what[64];
			snprintf(what, sizeof what, "AllReduce %s %s over tp", max ? "max" : "sum",
				 f8_dtype_name(types[t].dtype));
			f8_status s = f8_cuda_copy_to_device(in, sent, count * types[t].bytes, &diag);
			if (!s)
				s = f8_nccl_all_reduce(nccl, tp, in, out, count, types[t].dtype,
						       max ? F8_REDUCTION_MAX : F8_REDUCTION_SUM,
						       stream, &diag);
			round_trip(what, stream, out, count * types[t].bytes, s, &diag);
		}
	}
	if (!status) {
		fill();
		f8_status s = f8_cuda_copy_to_device(in, sent, BYTES, &diag);
		if (!s)
			s = f8_nccl_all_gather(nccl, tp_dp, in, out, BYTES, stream, &diag);
		round_trip("AllGather of bytes over tp+dp", stream, out, BYTES, s, &diag);
		fill();
		s = f8_cuda_copy_to_device(in, sent, BYTES, &diag);
		if (!s)
			s = f8_nccl_reduce_scatter(nccl, dp, in, out, BYTES / 4 - 10, F8_DTYPE_F32,
						   stream, &diag);
		round_trip("ReduceScatter f32 over dp", stream, out, BYTES - 40, s, &diag);
		fill();
		s = f8_cuda_copy_to_device(in, sent, BYTES, &diag);
		if (!s)
			s = f8_nccl_group_start(nccl, &diag);
		if (!s)
			s = f8_nccl_send(nccl, 1u << F8_MESH_AXIS_PP, 0, in, BYTES, stream, &diag);
		if (!s)
			s = f8_nccl_recv(nccl, 1u << F8_MESH_AXIS_PP, 0, out, BYTES, stream, &diag);
		if (!s)
			s = f8_nccl_group_end(nccl, &diag);
		round_trip("Send and Recv to this rank over pp", stream, out, BYTES, s, &diag);
		// Captured in a CUDA graph, then replayed on fresh data.
		CUgraphExec graph = 0;
		s = f8_cuda_capture_begin(stream, &diag);
		if (!s)
			s = f8_nccl_all_reduce(nccl, dp, in, out, BYTES / 4, F8_DTYPE_F32,
					       F8_REDUCTION_SUM, stream, &diag);
		f8_status ended = f8_cuda_capture_end(stream, &graph, s ? NULL : &diag);
		s = s ? s : ended;
		fill();
		if (!s)
			s = f8_cuda_copy_to_device(in, sent, BYTES, &diag);
		if (!s)
			s = f8_cuda_graph_launch(graph, stream, &diag);
		if (!s)
			s = f8_nccl_synchronize(nccl, stream, "the replayed AllReduce", &diag);
		round_trip("AllReduce captured and replayed", stream, out, BYTES, s, &diag);
		f8_cuda_graph_destroy(graph);
		// Refusals.
		f8_nccl_destroy(nccl);
		s = f8_nccl_create(NULL, 1u << tp, &nccl, &diag);
		CHECK(!s);
		s = s ? s : f8_nccl_all_reduce(nccl, dp, in, out, 4, F8_DTYPE_F32, F8_REDUCTION_SUM,
					       stream, &diag);
		printf("a group without a communicator: %s\n", diag.message);
		CHECK(s == F8_ERR_ARGUMENT && strstr(diag.message, "no communicator"));
		s = f8_nccl_all_reduce(nccl, tp, in, out, 4, F8_DTYPE_E4M3, F8_REDUCTION_MAX, stream,
				       &diag);
		printf("an FP8 reduction: %s\n", diag.message);
		CHECK(s == F8_ERR_UNSUPPORTED && strstr(diag.message, "e4m3"));
	}
	if (status)
		printf("FAILED: %s\n", diag.message);
	CHECK(!status);
	f8_nccl_destroy(nccl);
	(void)f8_cuda_free(in, NULL);
	(void)f8_cuda_free(out, NULL);
	f8_cuda_stream_destroy(stream);
	f8_cuda_close(&device);
	return test_finish();
}
