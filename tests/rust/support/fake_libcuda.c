/* A stand-in for the NVIDIA driver (libcuda.so), for testing ringenv's GPU staging on machines
 * without a GPU: the functions ringenv_runtime::staging calls, with "device memory" being host
 * memory (a CUdeviceptr is a host address), copies done at once, and events always complete.
 *
 * It checks what a real driver would refuse (a call needing a current context made without one,
 * a null device pointer) and counts what is acquired, printing the balance when unloaded (at exit):
 *     fake libcuda: retained=0 events=0 registered=0 host_allocs=0 contexts_pushed=0
 * Environment: FAKE_CUDA_DEVICES (device count, default 1), FAKE_CUDA_REGISTER_FAILS=1
 * (cuMemHostRegister returns CUDA_ERROR_NOT_PERMITTED, to exercise the pinned-mirror fallback),
 * FAKE_CUDA_NOT_READY=1 (cuEventQuery reports CUDA_ERROR_NOT_READY), FAKE_CUDA_SKIP_COPIES=1 (copies
 * checked but not done, as if a copy engine did them: benches/staging_cost.py).
 *
 * Built by tests/rust/staging.rs and tests/python/test_cuda_staging.py with
 *     cc -shared -fPIC -o DIR/libcuda.so fake_libcuda.c
 * and loaded through LD_LIBRARY_PATH=DIR in a child process. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
typedef void *CUevent;
typedef void *CUstream;
typedef unsigned long long CUdeviceptr;

enum {
    SUCCESS = 0, INVALID_VALUE = 1, NOT_INITIALIZED = 3, INVALID_DEVICE = 101,
    INVALID_CONTEXT = 201, NOT_READY = 600, NOT_PERMITTED = 800
};

static int initialised, pushed, retained, events, registered, host_allocs;
static int context_object;

/* At unload; silent for the load that only probes whether the library exists. */
__attribute__((destructor)) static void report(void) {
    if (!initialised) return;
    fprintf(stderr, "fake libcuda: retained=%d events=%d registered=%d host_allocs=%d contexts_pushed=%d\n",
            retained, events, registered, host_allocs, pushed);
}

static int devices(void) {
    const char *n = getenv("FAKE_CUDA_DEVICES");
    return n ? atoi(n) : 1;
}

CUresult cuInit(unsigned flags) { (void)flags; initialised = 1; return SUCCESS; }
CUresult cuDeviceGetCount(int *count) {
    if (!initialised) return NOT_INITIALIZED;
    *count = devices();
    return SUCCESS;
}
CUresult cuDeviceGet(CUdevice *device, int ordinal) {
    if (ordinal < 0 || ordinal >= devices()) return INVALID_DEVICE;
    *device = ordinal;
    return SUCCESS;
}
CUresult cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice device) {
    (void)device;
    *ctx = &context_object;
    retained++;
    return SUCCESS;
}
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice device) { (void)device; retained--; return SUCCESS; }
CUresult cuCtxPushCurrent_v2(CUcontext ctx) {
    if (ctx != &context_object || retained < 1) return INVALID_CONTEXT;
    pushed++;
    return SUCCESS;
}
CUresult cuCtxPopCurrent_v2(CUcontext *ctx) {
    if (pushed < 1) return INVALID_CONTEXT;
    pushed--;
    if (ctx) *ctx = &context_object;
    return SUCCESS;
}
CUresult cuEventCreate(CUevent *event, unsigned flags) {
    (void)flags;
    if (pushed < 1) return INVALID_CONTEXT;
    *event = malloc(1);
    events++;
    return SUCCESS;
}
CUresult cuEventDestroy_v2(CUevent event) { free(event); events--; return SUCCESS; }
CUresult cuEventRecord(CUevent event, CUstream stream) {
    (void)event; (void)stream;
    return pushed < 1 ? INVALID_CONTEXT : SUCCESS;
}
CUresult cuEventSynchronize(CUevent event) { (void)event; return SUCCESS; }
CUresult cuEventQuery(CUevent event) { (void)event; return getenv("FAKE_CUDA_NOT_READY") ? NOT_READY : SUCCESS; }
CUresult cuMemHostRegister_v2(void *p, size_t bytes, unsigned flags) {
    (void)p; (void)bytes; (void)flags;
    if (pushed < 1) return INVALID_CONTEXT;
    if (getenv("FAKE_CUDA_REGISTER_FAILS")) return NOT_PERMITTED;
    registered++;
    return SUCCESS;
}
CUresult cuMemHostUnregister(void *p) { (void)p; registered--; return SUCCESS; }
CUresult cuMemHostAlloc(void **p, size_t bytes, unsigned flags) {
    (void)flags;
    if (pushed < 1) return INVALID_CONTEXT;
    *p = calloc(1, bytes);
    host_allocs++;
    return SUCCESS;
}
CUresult cuMemFreeHost(void *p) { free(p); host_allocs--; return SUCCESS; }
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t bytes, CUstream stream) {
    (void)stream;
    if (pushed < 1) return INVALID_CONTEXT;
    if (dst == 0) return INVALID_VALUE;
    if (!getenv("FAKE_CUDA_SKIP_COPIES")) memcpy((void *)(uintptr_t)dst, src, bytes);
    return SUCCESS;
}
CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t bytes, CUstream stream) {
    (void)stream;
    if (pushed < 1) return INVALID_CONTEXT;
    if (src == 0) return INVALID_VALUE;
    memcpy(dst, (const void *)(uintptr_t)src, bytes);
    return SUCCESS;
}
CUresult cuStreamSynchronize(CUstream stream) { (void)stream; return pushed < 1 ? INVALID_CONTEXT : SUCCESS; }

static const char *name(CUresult e) {
    switch (e) {
        case SUCCESS: return "CUDA_SUCCESS";
        case INVALID_VALUE: return "CUDA_ERROR_INVALID_VALUE";
        case NOT_INITIALIZED: return "CUDA_ERROR_NOT_INITIALIZED";
        case INVALID_DEVICE: return "CUDA_ERROR_INVALID_DEVICE";
        case INVALID_CONTEXT: return "CUDA_ERROR_INVALID_CONTEXT";
        case NOT_READY: return "CUDA_ERROR_NOT_READY";
        case NOT_PERMITTED: return "CUDA_ERROR_NOT_PERMITTED";
        default: return 0;
    }
}
CUresult cuGetErrorName(CUresult e, const char **s) {
    *s = name(e);
    return *s ? SUCCESS : INVALID_VALUE;
}
CUresult cuGetErrorString(CUresult e, const char **s) {
    *s = name(e) ? "fake libcuda error" : 0;
    return *s ? SUCCESS : INVALID_VALUE;
}
