/// @file fiber_switch.h
/// @brief The CPU emulator's context switch (emulator_runtime.h): from one fiber's stack to another's.
///
/// The emulator switches fibers at every warp collective: about 64 switches per emulated mma.sync.
/// ucontext's swapcontext also saves and restores the signal mask, a system call each time, which
/// was over half of an emulated test's time. On x86-64 with ELF (Linux), `switch_to` saves only
/// what the System V ABI says a callee keeps (rbx, rbp, r12–r15, the SSE and x87 control words)
/// on the old stack and restores them from the new one: a few nanoseconds. Elsewhere it is
/// swapcontext, as before.
#pragma once

#include <cstddef>
#include <cstdint>

#if defined(__x86_64__) && defined(__ELF__)
#define FA_EMU_FAST_SWITCH 1
#else
#include <ucontext.h>
#endif

namespace tc::emu::detail {

#if FA_EMU_FAST_SWITCH

/// A suspended fiber: its stack pointer, where switch_to left its saved registers.
struct Context {
    void* sp = nullptr;
};

// fa_emu_switch(void** save_sp, void* load_sp): pushes the callee-saved registers and the two
// control words, stores rsp in *save_sp, loads rsp from load_sp and pops the other fiber's. In a
// COMDAT group, so every translation unit that includes this header may emit it and the linker
// keeps one.
asm(R"(
    .pushsection .text.fa_emu_switch,"axG",@progbits,fa_emu_switch,comdat
    .globl fa_emu_switch
    .hidden fa_emu_switch
    .type fa_emu_switch,@function
fa_emu_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $8, %rsp
    stmxcsr (%rsp)
    fnstcw 4(%rsp)
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    ldmxcsr (%rsp)
    fldcw 4(%rsp)
    addq $8, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size fa_emu_switch, .-fa_emu_switch
    .popsection
)");
extern "C" void fa_emu_switch(void** save_sp, void* load_sp);

/// Saves the running fiber in `from` and resumes `to`.
inline void switch_to(Context& from, const Context& to) { fa_emu_switch(&from.sp, to.sp); }

/// Prepares `c` so that the first switch_to(…, c) calls entry() on the stack [stack, stack + bytes).
/// entry must never return (it switches away for good instead).
inline void make_context(Context& c, unsigned char* stack, std::size_t bytes, void (*entry)()) {
    // The top, 16-byte aligned; below it a null return address for entry (its caller's slot, so
    // that on entry rsp + 8 is a multiple of 16, as the ABI wants), then the address the first
    // `ret` takes, six zero registers and the control words' defaults (MXCSR 0x1F80, x87 0x037F).
    auto* top = reinterpret_cast<std::uint64_t*>(reinterpret_cast<std::uintptr_t>(stack + bytes) & ~std::uintptr_t(15));
    std::uint64_t* p = top;
    *--p = 0;
    *--p = reinterpret_cast<std::uint64_t>(entry);
    for (int r = 0; r < 6; ++r) *--p = 0;
    *--p = 0x1F80u | (std::uint64_t(0x037Fu) << 32);
    c.sp = p;
}

#else

struct Context {
    ucontext_t uc;
};

inline void switch_to(Context& from, const Context& to) { swapcontext(&from.uc, &to.uc); }

inline void make_context(Context& c, unsigned char* stack, std::size_t bytes, void (*entry)()) {
    getcontext(&c.uc);
    c.uc.uc_stack.ss_sp = stack;
    c.uc.uc_stack.ss_size = bytes;
    c.uc.uc_link = nullptr;  // entry never returns
    makecontext(&c.uc, entry, 0);
}

#endif

}  // namespace tc::emu::detail
