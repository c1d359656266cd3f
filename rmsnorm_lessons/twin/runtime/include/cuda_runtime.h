// <cuda_runtime.h> on the CPU twin: the twin header
#pragma once
#include "cuda_twin.h"
