// the course includes <cuda_bf16.h>: on the CPU twin it is the twin header
#pragma once
#include "cuda_twin.h"
