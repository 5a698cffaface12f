"""Read the few facts of a 64-bit little-endian ELF shared library that installing and
loading mxhorovod needs, with the standard library only (setup.py loads this file by path,
before numpy or mxnet may be importable).

- :func:`dynamic_entries`: the SONAME, NEEDED, RPATH and RUNPATH entries.
- :func:`cxx11_abi`: whether the library's exported C++ functions use libstdc++'s new
  (``_GLIBCXX_USE_CXX11_ABI=1``) or old std::string ABI.
- :func:`undefined_symbols`: the dynamic symbols a library imports.
"""
import struct

__all__ = ["ElfError", "dynamic_entries", "cxx11_abi", "undefined_symbols"]

_SHT_DYNSYM = 11
_SHT_DYNAMIC = 6
_DT_TAGS = {1: "NEEDED", 14: "SONAME", 15: "RPATH", 29: "RUNPATH"}


class ElfError(ValueError):
    """The file is not a 64-bit little-endian ELF file, or is truncated."""


def _sections(f, path):
    head = f.read(64)
    if len(head) < 64 or head[:4] != b"\x7fELF":
        raise ElfError("%s is not an ELF file" % path)
    if head[4] != 2 or head[5] != 1:
        raise ElfError("%s is not a 64-bit little-endian ELF file" % path)
    shoff, = struct.unpack_from("<Q", head, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", head, 0x3A)
    f.seek(shoff)
    table = f.read(shentsize * shnum)
    if len(table) < shentsize * shnum:
        raise ElfError("%s is truncated (section headers)" % path)
    # sh_name, sh_type, sh_flags, sh_addr, sh_offset, sh_size, sh_link, ...
    return [struct.unpack_from("<IIQQQQI", table, i * shentsize) for i in range(shnum)]


def _read(f, section):
    f.seek(section[4])
    return f.read(section[5])


def _section_of_type(sections, kind):
    for s in sections:
        if s[1] == kind:
            return s
    return None


def dynamic_entries(path):
    """The dynamic section's NEEDED, SONAME, RPATH and RUNPATH entries of ``path``.

    Returns:
        A list of ``(tag, value)`` string pairs, in file order, e.g.
        ``[("NEEDED", "libmpi.so.12"), ("SONAME", "libfoo.so")]``; empty for a static file.
    Raises:
        ElfError: not a 64-bit little-endian ELF file.
    """
    with open(path, "rb") as f:
        sections = _sections(f, path)
        dyn = _section_of_type(sections, _SHT_DYNAMIC)
        if dyn is None:
            return []
        strtab = _read(f, sections[dyn[6]])
        data = _read(f, dyn)
    out = []
    for tag, val in struct.iter_unpack("<qQ", data[:len(data) // 16 * 16]):
        if tag == 0:
            break
        if tag in _DT_TAGS:
            out.append((_DT_TAGS[tag], strtab[val:strtab.index(b"\0", val)].decode()))
    return out


class _Symbols:
    """The dynamic symbol table's names (``strtab``) and, read on first use, ``items()``:
    (name offset, defined) pairs."""

    def __init__(self, path):
        self.path = path
        with open(path, "rb") as f:
            sections = _sections(f, path)
            self.section = _section_of_type(sections, _SHT_DYNSYM)
            self.strtab = b"" if self.section is None else _read(f, sections[self.section[6]])

    def items(self):
        if self.section is None:
            return {}.items()
        with open(self.path, "rb") as f:
            return _defined_by_name(_read(f, self.section)).items()


def _dynsym(path):
    """(names' string table, its symbols: a _Symbols)."""
    table = _Symbols(path)
    return table.strtab, table


def _defined_by_name(data):
    """{name offset: defined} of the Elf64_Sym entries in ``data``."""
    data = data[:len(data) // 24 * 24]
    # Elf64_Sym: st_name (I), st_info (B), st_other (B), st_shndx (H), st_value, st_size.
    try:  # numpy reads libmxnet's 65,000 symbols in milliseconds, struct in half a second
        import numpy as np
        table = np.frombuffer(data, dtype=[("name", "<u4"), ("info", "u1"), ("other", "u1"),
                                           ("shndx", "<u2"), ("value", "<u8"), ("size", "<u8")])
        return dict(zip(table["name"].tolist(), (table["shndx"] != 0).tolist()))
    except ImportError:  # setup.py, before numpy is installed
        return {name: shndx != 0 for name, _, _, shndx, _, _ in
                        struct.iter_unpack("<IBBHQQ", data)}


def undefined_symbols(path):
    """The names of the dynamic symbols that ``path`` imports (defined elsewhere)."""
    strtab, syms = _dynsym(path)
    return sorted({strtab[n:strtab.index(b"\0", n)].decode() for n, defined in syms.items()
                   if not defined and n})


# In a mangled name, libstdc++'s new std::string is "NSt7__cxx1112basic_string..." and
# functions returning one carry the tag "B5cxx11"; the old one is "Ss" ("RKSs": a
# const std::string&, "PSs": a pointer to one, "ISs": a template argument).
_NEW_MARKS = (b"St7__cxx11", b"B5cxx11")
_OLD_MARKS = (b"RKSs", b"PSs", b"ISs")


def _count_defined(strtab, defined_offsets, marks):
    seen = set()
    for mark in marks:
        pos = strtab.find(mark)
        while pos >= 0:
            start = strtab.rfind(b"\0", 0, pos) + 1
            if start in defined_offsets:
                seen.add(start)
            pos = strtab.find(mark, pos + 1)
    return len(seen)


def cxx11_abi(path):
    """Which std::string ABI the C++ functions that ``path`` exports were compiled with.

    Counts the exported (defined) symbols whose mangled names take or return a
    ``std::string`` of each ABI. Every MXNet 1.x wheel on PyPI is built with the old one.

    Returns:
        ``True`` (new ABI, ``_GLIBCXX_USE_CXX11_ABI=1``), ``False`` (old ABI), or ``None``
        when the library exports no such function (nothing to tell).
    Raises:
        ElfError: not a 64-bit little-endian ELF file.
    """
    strtab, syms = _dynsym(path)
    if not any(mark in strtab for mark in _NEW_MARKS):  # the common case, fast: no new-ABI name
        return False if any(mark in strtab for mark in _OLD_MARKS) else None
    defined = {n for n, d in syms.items() if d and n}
    new = _count_defined(strtab, defined, _NEW_MARKS)
    old = _count_defined(strtab, defined, _OLD_MARKS)
    if new == old == 0:
        return None
    return new > old
