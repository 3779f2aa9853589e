#pragma once
// Every file of src/kernels/cpu is compiled once per CPU path (cmake/VlparCpuIsa.cmake: base = the compiler's
// default x86-64, avx2 = x86-64-v3, avx512 = x86-64-v4), each time inside its own namespace
// vlpar::VLPAR_CPU_ISA_NAMESPACE (isa_base, isa_avx2, isa_avx512). Each path's objects are linked into one
// relocatable object whose symbols are all made local except that namespace, so the Eigen and inline-function
// instantiations of one path can never stand in for another's (an AVX-512 copy of a helper running on an AVX2
// CPU). The public ops (vlpar::rmsnorm_forward, ...) are defined once, in src/kernels/cpu_dispatch.cpp, and call
// the path cpu_isa_active() names. Inside these files an op of the same file is called with its namespace
// (VLPAR_CPU_ISA_NAMESPACE::op) where argument-dependent lookup would also find the public one.
#ifndef VLPAR_CPU_ISA_NAMESPACE
#error "src/kernels/cpu is compiled through vlpar_add_cpu_isa_kernels (cmake/VlparCpuIsa.cmake)"
#endif
