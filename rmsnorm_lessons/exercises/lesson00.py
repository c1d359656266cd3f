"""Lesson 00: the launch of a one-thread-per-element kernel, and the bytes it moves.

:func:`check_grid`: how many blocks a launch of ``n`` threads in blocks of ``block_size`` needs.
:func:`check_bytes`: how many bytes ``y[i] = a * x[i]`` moves through device memory for ``n``
floats.
"""
from __future__ import annotations

from . import Verdict, failed, passed, read_number


def check_grid(n: int, block_size: int, grid) -> Verdict:
    """``grid``: the fewest blocks of ``block_size`` threads that give each of ``n`` elements a
    thread."""
    got, verdict = read_number(grid, "of grid with your answer (a number or an expression)",
                               whole=True)
    if verdict is not None:
        return verdict
    n, block_size = int(n), int(block_size)
    want = -(-n // block_size)
    if got == want:
        idle = want * block_size - n
        return passed(f"{want} blocks of {block_size} = {want * block_size} threads; the last "
                      f"{idle} find i >= n and do nothing, which is why the kernel tests `if (i < "
                      f"n)`")
    if got == n // block_size and n % block_size:
        return failed(f"n // block_size = {got} rounds down: the last {n % block_size} elements "
                      f"would get no thread. Round up: (n + block_size - 1) // block_size")
    if got == n:
        return failed(f"{got} is one block per element: each block already has {block_size} "
                      f"threads")
    if got < want:
        return failed(f"{got} blocks give {got * block_size} threads, fewer than the {n} elements")
    return failed(f"{got} blocks work but are more than needed: {got - want} whole block(s) would "
                  f"do nothing")


def check_bytes(n: int, nbytes) -> Verdict:
    """``nbytes``: bytes that ``y[i] = a * x[i]`` reads plus writes for ``n`` float32 elements."""
    got, verdict = read_number(nbytes, "of nbytes with your answer (a number or an expression)",
                               whole=True)
    if verdict is not None:
        return verdict
    n = int(n)
    if got == 8 * n:
        return passed(f"{8 * n:,} bytes: 4 read and 4 written per element; "
                      f"bandwidth = bytes / time")
    if got == 4 * n:
        return failed("that counts one array; the kernel reads x and writes y, 4 bytes each per "
                      "element")
    if got == 2 * n:
        return failed("a float32 is 4 bytes, not 1; and x is read while y is written")
    if got == 12 * n:
        return failed("y is only written (not read first): y[i] = a * x[i], not y[i] += ...")
    return failed(f"{got:,} is not right: count the bytes of x read and of y written, per element, "
                  f"times n")
