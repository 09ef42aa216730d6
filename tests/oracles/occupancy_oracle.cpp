// Occupancy oracle: NVIDIA's cuda_occupancy.h fed the inputs Kineto gives it (default carveout, default
// per-function shared memory limit, partitioned global caching off). One case per line on stdin:
//   major minor maxThreadsPerBlock maxThreadsPerSM regsPerBlock regsPerSM warpSize sharedMemPerBlock
//   sharedMemPerSM sharedMemPerBlockOptin reservedSharedMemPerBlock numSms blockSize regs static dynamic
// One line out per case: "active warps blocks regs smem" (NVIDIA's limits), or "ERR <cudaOccError>".
// With the argument "optin": the function has opted in to its dynamic shared memory (FUNC_SHMEM_LIMIT_OPTIN,
// maxDynamicSharedSizeBytes = the launch's dynamic size), as kernels using more than 48 KiB must.
#include <climits>
#include <cstdio>
#include "cuda_occupancy.h"

int main(int argc, char **argv) {
    const bool opted_in = argc > 1 && argv[1][0] == 'o';
    int major, minor, mtpb, mtsm, rpb, rpsm, warp, sms, bs, regs;
    long smpb, smpsm, optin, resv, ssm, dsm;
    while (scanf("%d %d %d %d %d %d %d %ld %ld %ld %ld %d %d %d %ld %ld", &major, &minor, &mtpb, &mtsm, &rpb,
                 &rpsm, &warp, &smpb, &smpsm, &optin, &resv, &sms, &bs, &regs, &ssm, &dsm) == 16) {
        cudaOccDeviceProp p;
        p.computeMajor = major; p.computeMinor = minor; p.maxThreadsPerBlock = mtpb;
        p.maxThreadsPerMultiprocessor = mtsm; p.regsPerBlock = rpb; p.regsPerMultiprocessor = rpsm;
        p.warpSize = warp; p.sharedMemPerBlock = smpb; p.sharedMemPerMultiprocessor = smpsm; p.numSms = sms;
        p.sharedMemPerBlockOptin = optin; p.reservedSharedMemPerBlock = resv;
        cudaOccFuncAttributes a;                // default constructor: as Kineto builds it
        a.maxThreadsPerBlock = INT_MAX; a.numRegs = regs; a.sharedSizeBytes = ssm;
        a.partitionedGCConfig = PARTITIONED_GC_OFF; a.shmemLimitConfig = FUNC_SHMEM_LIMIT_DEFAULT;
        a.maxDynamicSharedSizeBytes = 0;
        if (opted_in) { a.shmemLimitConfig = FUNC_SHMEM_LIMIT_OPTIN; a.maxDynamicSharedSizeBytes = (int)dsm; }
        cudaOccDeviceState s;
        cudaOccResult r;
        cudaOccError e = cudaOccMaxActiveBlocksPerMultiprocessor(&r, &p, &a, &s, bs, dsm);
        if (e != CUDA_OCC_SUCCESS) printf("ERR %d\n", (int)e);
        else printf("%d %d %d %d %d\n", r.activeBlocksPerMultiprocessor, r.blockLimitWarps, r.blockLimitBlocks,
                    r.blockLimitRegs, r.blockLimitSharedMem);
    }
    return 0;
}
