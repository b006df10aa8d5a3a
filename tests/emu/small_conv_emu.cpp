// src/backend/cuda/small_conv.cu, unchanged, compiled for the CPU emulation (cuda_emu.h).
#include "emu/cuda_emu.h"
// The emulation replaces nvcc for this file.
#include "backend/cuda/small_conv.cu"
