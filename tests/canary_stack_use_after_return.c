/* A deliberately broken program: the AddressSanitizer build must catch it, or the sanitizer
 * suite would miss a class of bugs without anyone noticing.
 *
 * It reads a local variable of a function that has returned. AddressSanitizer reports that
 * only with ASAN_OPTIONS=detect_stack_use_after_return=1 (meson.build's test_env), so this
 * test is registered with should_fail in sanitizer builds: it passes while the option is on,
 * and fails the suite ("unexpected pass") if the option is ever lost. Without the option the
 * read is of a dead stack slot and the program exits 0. */
#include <stdint.h>
#include <stdio.h>

/* Stores the address of a local as an integer, so no compiler warning follows it. */
static __attribute__((noinline)) void dead_local(int value, uintptr_t *addr)
{
    volatile int local = value;
    *addr = (uintptr_t)&local;
}

int main(void)
{
    uintptr_t addr = 0;
    dead_local(42, &addr);
    volatile int seen = *(volatile int *)addr; /* the use after return */
    printf("read %d from a returned frame: detect_stack_use_after_return is off\n", seen);
    return 0;
}
