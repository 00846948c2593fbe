"""Test support shared by the test tiers only: what the benchmarks also use lives outside tests/ (free ports in
p2p_ops/lifecycle/free_ports.py, the SSH testbed in bench/testbed.py), so nothing outside tests/ imports this."""


def copy_blocks(src, src_blocks: list[int], dst, dst_blocks: list[int]) -> None:
    """What an LMCache retrieve does to the engine's paged KV: src's blocks, in order, into dst's."""
    for name, tensor in dst.tensors.items():
        tensor[:, dst_blocks] = src.tensors[name][:, src_blocks]
