#pragma once
// Portability macros shared by host and device code.
// VLPAR_HD marks functions callable from both CPU and CUDA code; that is how logic that does not depend on
// warps (index maps, rotary frequencies, dtype rounding, Philox) gets covered by CPU tests.
#if defined(__CUDACC__)
#define VLPAR_HD __host__ __device__
#define VLPAR_DEVICE __device__
#else
#define VLPAR_HD
#define VLPAR_DEVICE
#endif
#define VLPAR_FORCEINLINE inline __attribute__((always_inline))
