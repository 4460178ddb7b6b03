/*
 * The part of CUDA's driver API that the cuda backend calls, declared here so
 * that libhcomm builds without the CUDA headers and links without libcuda:
 * the library is opened at run time (cuda.c) and every function is looked
 * up with cuGetProcAddress for the API of CUDA 12.0 (HC_CUDA_API_VERSION),
 * which gives the versioned entry point a 12.0 header would name (cuMemAlloc
 * is cuMemAlloc_v2, cuStreamWaitValue32 is cuStreamWaitValue32_v2, ...).
 * Values and layouts are those of cuda.h; where the headers are found at
 * configure time, tests/gpu/test_cuda_abi.c checks every one against them.
 */
#ifndef HC_GPU_CUDA_API_H
#define HC_GPU_CUDA_API_H

#include <stddef.h>
#include <stdint.h>

/* The driver API the backend asks for: cuGetProcAddress_v2 (the 5-argument
 * form) and the VMM / dmabuf calls all exist from CUDA 12.0 on. */
#define HC_CUDA_API_VERSION 12000

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef unsigned long long CUmemGenericAllocationHandle;
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct {
    char reserved[64];
} CUipcMemHandle;
typedef struct {
    int type; /* CUmemLocationType */
    int id;
} CUmemLocation;
typedef struct {
    CUmemLocation location;
    int flags; /* CUmemAccess_flags */
} CUmemAccessDesc;

enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_INVALID_VALUE = 1,
    CUDA_ERROR_OUT_OF_MEMORY = 2,
    CUDA_ERROR_NOT_INITIALIZED = 3,
    CUDA_ERROR_NO_DEVICE = 100,
    CUDA_ERROR_NOT_FOUND = 500,
    CUDA_ERROR_NOT_READY = 600,
    CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED = 712,
    CUDA_ERROR_NOT_SUPPORTED = 801,
};

enum {
    CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2,
    CU_POINTER_ATTRIBUTE_BUFFER_ID = 7,
    CU_POINTER_ATTRIBUTE_IS_MANAGED = 8,
    CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9,
    CU_POINTER_ATTRIBUTE_RANGE_START_ADDR = 11,
    CU_POINTER_ATTRIBUTE_RANGE_SIZE = 12,
};
enum {
    CU_MEMORYTYPE_HOST = 1,
    CU_MEMORYTYPE_DEVICE = 2,
    CU_MEMORYTYPE_ARRAY = 3,
    CU_MEMORYTYPE_UNIFIED = 4
};

enum {
    CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16,
    CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING = 41,
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,
    CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED = 102,
    CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED = 103,
    CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED = 116,
    CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED = 124,
};

#define CU_MEM_ATTACH_GLOBAL 0x1
#define CU_STREAM_NON_BLOCKING 0x1
#define CU_EVENT_DISABLE_TIMING 0x2
#define CU_STREAM_WAIT_VALUE_GEQ 0x0
#define CU_STREAM_WRITE_VALUE_DEFAULT 0x0
#define CU_MEMHOSTREGISTER_PORTABLE 0x01
#define CU_MEMHOSTREGISTER_DEVICEMAP 0x02
#define CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS 0x1
#define CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR 0x1
#define CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD 0x1
#define CU_MEM_LOCATION_TYPE_DEVICE 0x1
#define CU_MEM_ACCESS_FLAGS_PROT_READWRITE 0x3
#define CU_GET_PROC_ADDRESS_DEFAULT 0
#define CU_GET_PROC_ADDRESS_SUCCESS 0
#define CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND 1
#define CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT 2

/* The three symbols taken by dlsym; everything else by cuGetProcAddress. */
typedef CUresult (*hc_cu_init_fn)(unsigned int flags);
typedef CUresult (*hc_cu_driver_get_version_fn)(int *version);
typedef CUresult (*hc_cu_get_proc_address_fn)(const char *symbol, void **pfn, int cuda_version,
                                              uint64_t flags, int *symbol_status);

/* X(name, return-less parameter list) for every function looked up. */
#define HC_CUDA_FUNCS(X)                                                                           \
    X(cuGetErrorName, (CUresult e, const char **s))                                                \
    X(cuGetErrorString, (CUresult e, const char **s))                                              \
    X(cuDeviceGetCount, (int *n))                                                                  \
    X(cuDeviceGet, (CUdevice * d, int ordinal))                                                    \
    X(cuDeviceGetName, (char *name, int len, CUdevice d))                                          \
    X(cuDeviceTotalMem, (size_t * bytes, CUdevice d))                                              \
    X(cuDeviceGetAttribute, (int *v, int attr, CUdevice d))                                        \
    X(cuDevicePrimaryCtxRetain, (CUcontext * c, CUdevice d))                                       \
    X(cuDevicePrimaryCtxRelease, (CUdevice d))                                                     \
    X(cuCtxGetCurrent, (CUcontext * c))                                                            \
    X(cuCtxSetCurrent, (CUcontext c))                                                              \
    X(cuCtxGetDevice, (CUdevice * d))                                                              \
    X(cuCtxPushCurrent, (CUcontext c))                                                             \
    X(cuCtxPopCurrent, (CUcontext * c))                                                            \
    X(cuPointerGetAttributes, (unsigned n, int *attrs, void **data, CUdeviceptr p))                \
    X(cuMemGetAddressRange, (CUdeviceptr * base, size_t * size, CUdeviceptr p))                    \
    X(cuMemAlloc, (CUdeviceptr * p, size_t n))                                                     \
    X(cuMemAllocManaged, (CUdeviceptr * p, size_t n, unsigned flags))                              \
    X(cuMemFree, (CUdeviceptr p))                                                                  \
    X(cuMemcpyAsync, (CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s))                     \
    X(cuMemHostRegister, (void *p, size_t n, unsigned flags))                                      \
    X(cuMemHostUnregister, (void *p))                                                              \
    X(cuMemHostGetDevicePointer, (CUdeviceptr * d, void *p, unsigned flags))                       \
    X(cuStreamCreate, (CUstream * s, unsigned flags))                                              \
    X(cuStreamDestroy, (CUstream s))                                                               \
    X(cuStreamSynchronize, (CUstream s))                                                           \
    X(cuStreamWaitEvent, (CUstream s, CUevent e, unsigned flags))                                  \
    X(cuStreamWaitValue32, (CUstream s, CUdeviceptr a, uint32_t v, unsigned flags))                \
    X(cuStreamWriteValue32, (CUstream s, CUdeviceptr a, uint32_t v, unsigned flags))               \
    X(cuEventCreate, (CUevent * e, unsigned flags))                                                \
    X(cuEventRecord, (CUevent e, CUstream s))                                                      \
    X(cuEventQuery, (CUevent e))                                                                   \
    X(cuEventSynchronize, (CUevent e))                                                             \
    X(cuEventDestroy, (CUevent e))                                                                 \
    X(cuModuleLoadData, (CUmodule * m, const void *image))                                         \
    X(cuModuleUnload, (CUmodule m))                                                                \
    X(cuModuleGetFunction, (CUfunction * f, CUmodule m, const char *name))                         \
    X(cuLaunchKernel,                                                                              \
      (CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, \
       unsigned shmem, CUstream s, void **params, void **extra))                                   \
    X(cuIpcGetMemHandle, (CUipcMemHandle * h, CUdeviceptr p))                                      \
    X(cuIpcOpenMemHandle, (CUdeviceptr * p, CUipcMemHandle h, unsigned flags))                     \
    X(cuIpcCloseMemHandle, (CUdeviceptr p))                                                        \
    X(cuMemRetainAllocationHandle, (CUmemGenericAllocationHandle * h, void *p))                    \
    X(cuMemRelease, (CUmemGenericAllocationHandle h))                                              \
    X(cuMemExportToShareableHandle,                                                                \
      (void *out, CUmemGenericAllocationHandle h, int type, unsigned long long flags))             \
    X(cuMemImportFromShareableHandle, (CUmemGenericAllocationHandle * h, void *os, int type))      \
    X(cuMemAddressReserve,                                                                         \
      (CUdeviceptr * p, size_t n, size_t align, CUdeviceptr addr, unsigned long long flags))       \
    X(cuMemAddressFree, (CUdeviceptr p, size_t n))                                                 \
    X(cuMemMap, (CUdeviceptr p, size_t n, size_t off, CUmemGenericAllocationHandle h,              \
                 unsigned long long flags))                                                        \
    X(cuMemUnmap, (CUdeviceptr p, size_t n))                                                       \
    X(cuMemSetAccess, (CUdeviceptr p, size_t n, const CUmemAccessDesc *d, size_t count))           \
    X(cuMemGetHandleForAddressRange,                                                               \
      (void *out, CUdeviceptr p, size_t n, int type, unsigned long long flags))

#endif /* HC_GPU_CUDA_API_H */
