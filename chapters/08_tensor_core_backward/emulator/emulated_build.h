/// @file emulated_build.h
/// @brief Chapter 8: what the emulated build injects before any kernel header (which never includes
/// the emulator): the switch and the emulated PTX instructions.
#pragma once

#define FA_TC_EMULATE 1
#include "../../../common/tensor_core/emulator.h"
#include "../../../common/tensor_core/emulated_ptx.h"
