/*
 * Unit tests of the ONNX writer through its C API: the weights' generator (counter-based: any
 * cut of a tensor into ranges gives the same numbers; seeds and names give independent streams;
 * the moments of normal(0, std)), the initialization rules, options out of range, and
 * allocation failure at every allocation of an export: each ends in F8_ERR_NOMEM with no file
 * left in the folder (and, in the sanitizer build, no leak).
 *
 * usage: test_export_unit SOURCE_DIR
 */
#define _POSIX_C_SOURCE 200809L // mkdtemp, rmdir, unlink

#include <dirent.h> // opendir, readdir
#include <math.h>   // fabs, sqrt
#include <stdio.h>  // printf, snprintf
#include <stdlib.h> // malloc, realloc, free, mkdtemp
#include <string.h> // strcmp
#include <unistd.h> // rmdir, unlink

#include "frontend/json/model_json.h"  // f8_json_model_load
#include "frontend/onnx/onnx_export.h" // f8_onnx_export, f8_weight_init_*
#include "tests/test_support.h"         // CHECK, test_fail_allocations_after

enum { N = 4096 };

static void test_generator(void) {
	static float whole[N], pieces[N], other_seed[N], other_name[N];
	f8_weight_init rule = {.kind = F8_WEIGHT_INIT_NORMAL, .std = 0.02};
	f8_weight_init_fill(&rule, 1234, "layers.0.attn.qkv.weight", 0, N, whole);
	// Odd cuts split Box-Muller's pairs: the numbers must not change.
	uint64_t cuts[] = {0, 1, 2, 7, 100, 101, 2047, N};
	for (int i = 0; i + 1 < 8; i++)
		f8_weight_init_fill(&rule, 1234, "layers.0.attn.qkv.weight", cuts[i],
				    cuts[i + 1] - cuts[i], pieces + cuts[i]);
	CHECK(memcmp(whole, pieces, sizeof whole) == 0);
	f8_weight_init_fill(&rule, 1235, "layers.0.attn.qkv.weight", 0, N, other_seed);
	f8_weight_init_fill(&rule, 1234, "layers.1.attn.qkv.weight", 0, N, other_name);
	double sum = 0, squares = 0, same_seed = 0, same_name = 0;
	for (int i = 0; i < N; i++) {
		sum += whole[i], squares += (double)whole[i] * whole[i];
		same_seed += whole[i] == other_seed[i], same_name += whole[i] == other_name[i];
	}
	double mean = sum / N, std = sqrt(squares / N - mean * mean);
	CHECK(fabs(mean) < 0.002 && fabs(std - 0.02) < 0.001);
	CHECK(same_seed == 0 && same_name == 0);
	f8_weight_init ones = {.kind = F8_WEIGHT_INIT_ONES}, zeros = {.kind = F8_WEIGHT_INIT_ZEROS};
	f8_weight_init_fill(&ones, 1, "x", 5, 3, pieces);
	f8_weight_init_fill(&zeros, 1, "x", 5, 3, pieces + 3);
	CHECK(pieces[0] == 1 && pieces[2] == 1 && pieces[3] == 0 && pieces[5] == 0);
}

/* The rule for the parameter `name` of `graph`. */
static f8_weight_init rule_of(const f8_graph *graph, const char *name) {
	f8_value_id value = f8_graph_find_value(graph, name, strlen(name));
	return f8_weight_init_rule(graph, value, f8_weight_init_layers(graph));
}

static void test_rules(const char *source) {
	char path[4096];
	snprintf(path, sizeof path, "%s/models/gpt-tiny.json", source);
	f8_graph *graph;
	f8_diag diag;
	CHECK(f8_json_model_load(path, 0, &graph, &diag) == F8_OK);
	if (!graph)
		return;
	CHECK(f8_weight_init_layers(graph) == 4);
	CHECK(rule_of(graph, "layers.2.mlp_norm.weight").kind == F8_WEIGHT_INIT_ONES);
	CHECK(rule_of(graph, "layers.2.mlp_norm.bias").kind == F8_WEIGHT_INIT_ZEROS);
	CHECK(rule_of(graph, "layers.2.mlp.fc1.bias").kind == F8_WEIGHT_INIT_ZEROS);
	f8_weight_init embed = rule_of(graph, "embed.weight");
	f8_weight_init fc1 = rule_of(graph, "layers.0.mlp.fc1.weight");
	f8_weight_init proj = rule_of(graph, "layers.3.attn.proj.weight");
	f8_weight_init fc2 = rule_of(graph, "layers.3.mlp.fc2.weight");
	CHECK(embed.kind == F8_WEIGHT_INIT_NORMAL && embed.std == 0.02 && fc1.std == 0.02);
	CHECK(fabs(proj.std - 0.02 / sqrt(8.0)) < 1e-12 && fc2.std == proj.std);
	f8_graph_destroy(graph);
}

/* The names in `folder` other than . and .., into `count`. */
static int count_files(const char *folder) {
	DIR *dir = opendir(folder);
	int count = 0;
	for (struct dirent *entry; dir && (entry = readdir(dir));)
		count += strcmp(entry->d_name, ".") != 0 && strcmp(entry->d_name, "..") != 0;
	if (dir)
		closedir(dir);
	return count;
}

static void test_options(const f8_graph *graph, const char *folder) {
	char path[4096];
	snprintf(path, sizeof path, "%s/m.onnx", folder);
	f8_diag diag;
	f8_onnx_export_options options = {.seed = 1, .opset = 16};
	CHECK(f8_onnx_export(graph, path, &options, &diag) == F8_ERR_ARGUMENT);
	options.opset = 25;
	CHECK(f8_onnx_export(graph, path, &options, &diag) == F8_ERR_ARGUMENT);
	snprintf(path, sizeof path, "%s/missing/m.onnx", folder);
	CHECK(f8_onnx_export(graph, path, NULL, &diag) == F8_ERR_ARGUMENT && diag.hint[0]);
	snprintf(path, sizeof path, "%s/", folder);
	CHECK(f8_onnx_export(graph, path, NULL, &diag) == F8_ERR_ARGUMENT);
	CHECK(count_files(folder) == 0);
}

/* Exports `graph` with the n-th allocation failing, for every n, into an empty `folder`. */
static void check_allocation_failure(const f8_graph *graph, const char *folder, const char *what) {
	char path[4096], data[4096];
	snprintf(path, sizeof path, "%s/m.onnx", folder);
	snprintf(data, sizeof data, "%s/m.onnx.data", folder);
	bool all_clean = true;
	long n;
	for (n = 0; n < 100000; n++) {
		f8_diag diag;
		f8_diag_clear(&diag);
		test_fail_allocations_after(n);
		f8_status status = f8_onnx_export(graph, path, NULL, &diag);
		test_allocations_restore();
		if (status == F8_OK)
			break;
		if (status != F8_ERR_NOMEM || !diag.message[0] || count_files(folder) != 0) {
			printf("FAIL: exporting %s with allocation %ld failing: status %d (%s), "
			       "%d files\n", what, n, status, diag.message, count_files(folder));
			all_clean = false;
		}
	}
	CHECK(all_clean);
	CHECK(n > 5 && n < 100000 && count_files(folder) == 2);
	unlink(path);
	unlink(data);
	printf("allocation failure: checked every one of the %ld allocations exporting %s\n", n,
	       what);
}

int main(int argc, char **argv) {
	if (argc != 2) {
		fprintf(stderr, "usage: test_export_unit SOURCE_DIR\n");
		return 2;
	}
	test_generator();
	test_rules(argv[1]);
	char folder[] = "/tmp/f8c-export-unit-XXXXXX";
	if (!mkdtemp(folder)) {
		printf("FAIL: cannot make a temporary folder\n");
		return 1;
	}
	static const char *const models[] = {"gpt-tiny", "llama-tiny", "moe"};
	static const char moe[] = "{\"arch\": \"moe\", \"vocab\": 32, \"seq\": 8, \"layers\": 1, "
				  "\"hidden\": 16, \"heads\": 2, \"ffn\": 16, \"experts\": 4}";
	for (int i = 0; i < 3; i++) {
		char path[4096];
		snprintf(path, sizeof path, "%s/models/%s.json", argv[1], models[i]);
		f8_graph *graph;
		f8_diag diag;
		f8_status status;
		if (i < 2)
			status = f8_json_model_load(path, 0, &graph, &diag);
		else
			status = f8_json_model_parse(moe, sizeof moe - 1, "moe.json", 0, &graph,
						     &diag);
		CHECK(status == F8_OK);
		if (!graph)
			continue;
		if (i == 0)
			test_options(graph, folder);
		check_allocation_failure(graph, folder, models[i]);
		f8_graph_destroy(graph);
	}
	rmdir(folder);
	return test_finish();
}
