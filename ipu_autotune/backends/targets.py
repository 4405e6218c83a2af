"""IPU generations as data. Every number says where it comes from.

Tags as in our hardware notes: [S] a published source, [C] Graphcore source code,
[D] derived from tagged facts, [U] unverified (treated as a calibration parameter).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Target:
    name: str
    tiles: int  # tiles per IPU
    bytes_per_tile: int
    clock_hz: float
    # Peak FLOP per cycle per tile for each compute mode ("fp32", "fp16.32" = fp16 inputs
    # with float partials, "fp16.16" = fp16 with half partials).
    flop_per_cycle_per_tile: dict[str, int]
    sram_bytes_per_s: float  # per IPU
    ipu_link_bytes_per_s: float  # between two neighbouring IPUs, one direction
    host_bytes_per_s: float  # host to one IPU
    streaming_bytes_per_s: float  # Streaming Memory to one IPU, one direction

    @property
    def bytes_per_ipu(self) -> int:
        return self.tiles * self.bytes_per_tile

    def peak_flops(self, mode: str) -> float:
        return self.tiles * self.flop_per_cycle_per_tile[mode] * self.clock_hz


MK2 = Target(
    name="mk2",
    tiles=1472,  # [S] GC200 datasheets
    bytes_per_tile=638_976,  # [C] popart available_memory_proportion_test; [S] MPO ch. 6 OOM text
    clock_hz=1.325e9,  # [D] 250 TFLOPS / (1472 tiles x 128 FLOP/cycle)
    # [D] fp16.16 = 128 (250 TFLOPS); [U] fp16.32 = half of it (poplibs enables the faster
    # AMP configuration only for half partials); [S] fp32 = 62.5 TFLOPS -> 32
    flop_per_cycle_per_tile={"fp16.16": 128, "fp16.32": 64, "fp32": 32},
    sram_bytes_per_s=47.5e12,  # [S] GC200 figures
    ipu_link_bytes_per_s=64e9,  # [U] 320 GB/s over 10 links; a few links join pipeline neighbours
    host_bytes_per_s=6e9,  # [U] gateway PCIe Gen4 x8 per IPU, less protocol overhead
    streaming_bytes_per_s=16e9,  # [U] bounded by PCIe Gen4 x8 per direction
)

BOW = Target(
    name="bow",
    tiles=1472,  # [S] same die as GC200
    bytes_per_tile=638_976,
    clock_hz=1.85e9,  # [S] Bow-2000 datasheet
    flop_per_cycle_per_tile={"fp16.16": 128, "fp16.32": 64, "fp32": 32},  # [D] 350 TFLOPS
    sram_bytes_per_s=47.5e12 * 1.85 / 1.325,  # [D] scales with clock
    ipu_link_bytes_per_s=64e9,
    host_bytes_per_s=6e9,
    streaming_bytes_per_s=16e9,
)

MK1 = Target(
    name="mk1",
    tiles=1216,  # [S] Jia et al. 2019
    bytes_per_tile=262_144,  # [S] 256 KiB per tile
    clock_hz=1.6e9,  # [S] Jia et al.
    # [S] 124.5 TFLOPS mixed -> 64 FLOP/cycle/tile; [U] half partials assumed 2x as on Mk2;
    # [S] 31.1 TFLOPS fp32 -> 16
    flop_per_cycle_per_tile={"fp16.16": 64, "fp16.32": 32, "fp32": 16},
    sram_bytes_per_s=45e12,  # [S] Jia et al.
    ipu_link_bytes_per_s=32e9,  # [U]
    host_bytes_per_s=6e9,  # [U] PCIe card
    streaming_bytes_per_s=0.0,  # [S] Mk1 has no Streaming Memory: offload impossible
)

TARGETS = {t.name: t for t in (MK1, MK2, BOW)}


def get_target(name: str) -> Target:
    return TARGETS[name]
