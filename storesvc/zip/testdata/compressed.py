"""Writes testdata/compressed.zip, the golden archive of the zip store's
compressed-member tests, with CPython's own zipfile:

    python compressed.py OUT.zip

Python 3.14's zipfile writes Zstandard members (ZIP_ZSTANDARD, method 93);
on older Pythons the same module, backported, comes with the PyPI package
backports.zstd (used here: backports.zstd 1.8.0 on Python 3.11, whose
zipfile is 3.14's). Bzip2 members (ZIP_BZIP2, method 12) and deflated ones
come from every zipfile.

Members (content(n) is the first n bytes of the lines
"line {i}: {i*i % 9973}\\n" for i = 0, 1, ...; TestCompressedMembers
builds the same):

    bzip2.bin, zstd.bin                             content(1_000_000)
    bzip2-small.bin, zstd-small.bin                 content(1000)
    bzip2-empty.bin, zstd-empty.bin                 empty
    zstd-level19.bin                                content(300_000), level 19
    a/zarr.json                                     bzip2, a Zarr v3 group

1,000,000 bytes exceed bzip2's largest block (900 kB), so the bzip2 member
has two blocks; the zstd member spans many zstd blocks.
"""

import sys

if sys.version_info >= (3, 14):
    import zipfile
else:
    from backports.zstd import zipfile


def content(n):
    out = bytearray()
    i = 0
    while len(out) < n:
        out += f"line {i}: {i * i % 9973}\n".encode()
        i += 1
    return bytes(out[:n])


def main(path):
    big = content(1_000_000)
    # A fixed date so that the archive is the same on every run.
    def info(name, method, level=None):
        zi = zipfile.ZipInfo(name, date_time=(2025, 1, 1, 0, 0, 0))
        zi.compress_type = method
        if level is not None:
            zi.compress_level = level
        return zi

    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(info("bzip2.bin", zipfile.ZIP_BZIP2), big)
        zf.writestr(info("zstd.bin", zipfile.ZIP_ZSTANDARD), big)
        zf.writestr(info("bzip2-small.bin", zipfile.ZIP_BZIP2), content(1000))
        zf.writestr(info("zstd-small.bin", zipfile.ZIP_ZSTANDARD), content(1000))
        zf.writestr(info("bzip2-empty.bin", zipfile.ZIP_BZIP2), b"")
        zf.writestr(info("zstd-empty.bin", zipfile.ZIP_ZSTANDARD), b"")
        zf.writestr(info("zstd-level19.bin", zipfile.ZIP_ZSTANDARD, 19), content(300_000))
        zf.writestr(info("a/zarr.json", zipfile.ZIP_BZIP2),
                    b'{"zarr_format":3,"node_type":"group","attributes":{"compressed":"bzip2"}}')
    with zipfile.ZipFile(path) as zf:
        for zi in zf.infolist():
            print(zi.filename, zi.compress_type, zi.compress_size, zi.file_size)


if __name__ == "__main__":
    main(sys.argv[1])
