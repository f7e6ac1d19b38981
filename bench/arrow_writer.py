#!/usr/bin/env python3
"""The field's Parquet writer on the store's own rows: Arrow C++ (through pyarrow) writes the
flows table of a tapflow store, read back and sorted by time_start, into one file, at several
zstd levels and encodings, on whatever core it is given. Prints one line per setting: CPU per
million rows (user + system, mean of 3 writes) and bytes per row.

    taskset -c 0 python3 bench/arrow_writer.py STORE_DIR
"""
import glob
import os
import resource
import sys
import tempfile

import pyarrow as pa
import pyarrow.parquet as pq


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main() -> None:
    files = sorted(glob.glob(os.path.join(sys.argv[1], "flows", "**", "*.parquet"), recursive=True))
    t = pa.concat_tables([pq.read_table(f) for f in files]).sort_by("time_start")
    wide_ints = [f.name for f in t.schema
                 if pa.types.is_integer(f.type) and f.type.bit_width >= 32]
    settings = [
        ("dictionary (pyarrow's default)", {}),
        ("plain", {"use_dictionary": False}),
        ("plain, 32/64-bit integers delta-coded", {
            "use_dictionary": False,
            "column_encoding": {n: "DELTA_BINARY_PACKED" for n in wide_ints}}),
    ]
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "flows.parquet")
        for level in (1, 3, 9):
            for name, kw in settings:
                c0 = cpu()
                for _ in range(3):
                    pq.write_table(t, out, compression="zstd", compression_level=level,
                                   row_group_size=131072, write_statistics=False, **kw)
                per_m = (cpu() - c0) / 3 / t.num_rows * 1e6
                size = os.path.getsize(out) / t.num_rows
                print(f"Arrow C++ {pa.__version__}, zstd {level}, {name}: "
                      f"{per_m:.3f} s per M rows, {size:.2f} B/row ({t.num_rows} rows)")


if __name__ == "__main__":
    main()
