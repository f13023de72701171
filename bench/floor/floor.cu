/* The driver's floor for a launch: the dispatch bench's kernel, out[i] = a * x[i] on 1 Ki
 * float32, launched with cuLaunchKernel, its parameters packed once, and with the runtime's
 * <<<>>> for reference, on the legacy default stream, as a numbatune hit with numba arrays
 * launches it.
 *
 * Built by bench/floor/__init__.py with nvcc. As a program, ``floor [BATCHES [PER_BATCH]]``
 * prints one JSON object: for each method the median and each batch's microseconds per launch
 * (a batch: PER_BATCH launches and one synchronisation; the methods take turns batch by
 * batch). As a shared library (-DFLOOR_LIBRARY), ``floor_batch(method, count)`` makes one batch
 * of ``count`` launches without the synchronisation, for the bench to time in its own rounds.
 *
 * The driver is found at run time (dlopen libcuda.so.1, as numbatune's extension finds it), so
 * only the CUDA toolkit's nvcc and runtime are needed to build.
 */
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define SIZE 1024
#define BLOCK 256

extern "C" __global__ void scale(const float *x, float *out, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a * x[i];
}

typedef int (*launch_kernel_t)(void *function, unsigned grid_x, unsigned grid_y,
                               unsigned grid_z, unsigned block_x, unsigned block_y,
                               unsigned block_z, unsigned shared_bytes, void *stream,
                               void **parameters, void **extra);

static launch_kernel_t launch_kernel = NULL;
static void *function = NULL;
static float *x = NULL, *out = NULL, a = 2.0f;
static int n = SIZE;
static void *parameters[] = {&x, &out, &a, &n}; /* packed once */

/* 0, or -1 with a line on stderr. */
static int setup(void) {
    if (launch_kernel != NULL) return 0;
    void *driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (driver == NULL) {
        fprintf(stderr, "floor: cannot load libcuda.so.1: %s\n", dlerror());
        return -1;
    }
    cudaError_t error = cudaFree(0); /* the device's primary context, current */
    if (error == cudaSuccess) error = cudaMalloc(&x, SIZE * sizeof(float));
    if (error == cudaSuccess) error = cudaMalloc(&out, SIZE * sizeof(float));
    if (error == cudaSuccess) {
        error = cudaGetFuncBySymbol((cudaFunction_t *)&function, (const void *)scale);
    }
    if (error != cudaSuccess) {
        fprintf(stderr, "floor: %s\n", cudaGetErrorString(error));
        return -1;
    }
    launch_kernel = (launch_kernel_t)dlsym(driver, "cuLaunchKernel");
    return launch_kernel == NULL ? -1 : 0;
}

/* One batch of ``count`` launches: method 0 cuLaunchKernel, 1 the runtime's <<<>>>; 0, or the
 * first error. */
extern "C" int floor_batch(int method, int count) {
    if (setup() < 0) return -1;
    const unsigned grid = (SIZE + BLOCK - 1) / BLOCK;
    for (int i = 0; i < count; i++) {
        int error;
        if (method == 0) {
            error = launch_kernel(function, grid, 1, 1, BLOCK, 1, 1, 0, NULL, parameters, NULL);
        } else {
            scale<<<grid, BLOCK>>>(x, out, a, n);
            error = (int)cudaGetLastError();
        }
        if (error) return error;
    }
    return 0;
}

#ifndef FLOOR_LIBRARY
static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static int by_value(const void *a, const void *b) {
    double d = *(const double *)a - *(const double *)b;
    return (d > 0) - (d < 0);
}

int main(int argc, char **argv) {
    int batches = argc > 1 ? atoi(argv[1]) : 30, per_batch = argc > 2 ? atoi(argv[2]) : 300;
    static const char *names[] = {"cuLaunchKernel, packed once", "runtime <<<>>>"};
    if (batches < 1 || per_batch < 1 || batches > 10000) {
        fprintf(stderr, "usage: floor [BATCHES [PER_BATCH]]\n");
        return 2;
    }
    double *samples = (double *)calloc(2 * (size_t)batches, sizeof(double));
    for (int round = -batches / 4 - 1; round < batches; round++) { /* a warm-up, untimed */
        for (int turn = 0; turn < 2; turn++) {
            int method = round % 2 ? 1 - turn : turn;
            double started = now_us();
            int error = floor_batch(method, per_batch);
            if (error == 0) error = (int)cudaDeviceSynchronize();
            if (error) {
                fprintf(stderr, "floor: launch failed: %d\n", error);
                return 1;
            }
            if (round >= 0) samples[method * batches + round] = (now_us() - started) / per_batch;
        }
    }
    printf("{\"batches\": %d, \"calls_per_batch\": %d", batches, per_batch);
    for (int method = 0; method < 2; method++) {
        double *mine = samples + method * batches, sorted[10000];
        printf(", \"%s\": {\"rounds\": [", names[method]);
        for (int i = 0; i < batches; i++) printf("%s%.4f", i ? ", " : "", mine[i]);
        for (int i = 0; i < batches; i++) sorted[i] = mine[i];
        qsort(sorted, batches, sizeof(double), by_value);
        double median = batches % 2 ? sorted[batches / 2]
                                    : (sorted[batches / 2 - 1] + sorted[batches / 2]) / 2;
        printf("], \"median_us\": %.4f}", median);
    }
    printf("}\n");
    free(samples);
    return 0;
}
#endif
