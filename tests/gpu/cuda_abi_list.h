/* The values and layouts gpu/cuda/cuda_api.h declares, listed once for
 * test_cuda_abi (cuda_abi_hc.c reads them from cuda_api.h, cuda_abi_cuda.c
 * from CUDA's cuda.h). */
#define HC_CUDA_ABI_LIST(X)                                                                        \
    X(CUDA_SUCCESS) X(CUDA_ERROR_INVALID_VALUE) X(CUDA_ERROR_OUT_OF_MEMORY)                        \
    X(CUDA_ERROR_NOT_INITIALIZED) X(CUDA_ERROR_NO_DEVICE) X(CUDA_ERROR_NOT_FOUND)                  \
    X(CUDA_ERROR_NOT_READY) X(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED)                           \
    X(CUDA_ERROR_NOT_SUPPORTED) X(CU_POINTER_ATTRIBUTE_MEMORY_TYPE)                                \
    X(CU_POINTER_ATTRIBUTE_BUFFER_ID) X(CU_POINTER_ATTRIBUTE_IS_MANAGED)                           \
    X(CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL) X(CU_POINTER_ATTRIBUTE_RANGE_START_ADDR)                \
    X(CU_POINTER_ATTRIBUTE_RANGE_SIZE) X(CU_MEMORYTYPE_HOST) X(CU_MEMORYTYPE_DEVICE)               \
    X(CU_MEMORYTYPE_ARRAY) X(CU_MEMORYTYPE_UNIFIED) X(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)    \
    X(CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING) X(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)      \
    X(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)                                                \
    X(CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED)                                     \
    X(CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED)                             \
    X(CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED) X(CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED)      \
    X(CU_MEM_ATTACH_GLOBAL) X(CU_STREAM_NON_BLOCKING) X(CU_EVENT_DISABLE_TIMING)                   \
    X(CU_STREAM_WAIT_VALUE_GEQ) X(CU_STREAM_WRITE_VALUE_DEFAULT) X(CU_MEMHOSTREGISTER_PORTABLE)    \
    X(CU_MEMHOSTREGISTER_DEVICEMAP) X(CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)                          \
    X(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) X(CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD)             \
    X(CU_MEM_LOCATION_TYPE_DEVICE) X(CU_MEM_ACCESS_FLAGS_PROT_READWRITE)                           \
    X(CU_GET_PROC_ADDRESS_DEFAULT) X(CU_GET_PROC_ADDRESS_SUCCESS)                                  \
    X(CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND) X(CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT)          \
    X(sizeof(CUresult)) X(sizeof(CUdevice)) X(sizeof(CUdeviceptr))                                 \
    X(sizeof(CUmemGenericAllocationHandle)) X(sizeof(CUipcMemHandle)) X(sizeof(CUmemLocation))    \
    X(sizeof(CUmemAccessDesc)) X(offsetof(CUmemAccessDesc, flags))                                 \
    X(offsetof(CUmemLocation, id))
