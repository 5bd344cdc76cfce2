"""nostall.Dataset (python/nostall/dataset.py over nostall_dataset.h): the
items of a folder and a list file as the loader indexes them, the distinct
files, errors naming the path, and options checked by name."""

import os

import pytest

import nostall
from conftest import gen


def test_folder_and_list(tmp_path):
    root = gen(tmp_path / "data", 9, 3)
    with nostall.Dataset(root) as ds:
        assert len(ds) == 9 and ds.label_kind == "int"
        items = [ds[i] for i in range(len(ds))]
        assert ds[-1] == items[-1]
        with pytest.raises(IndexError):
            ds[9]
        assert ds.files() == [p for p, _, _, _ in items]
        ld = nostall.Loader(root, threads=1, batch_size=3)
        try:
            assert [ld.item(i) for i in range(9)] == [(p, lab) for p, lab, _, _ in items]
        finally:
            ld.close()
        for path, label, off, length in items:
            assert os.path.isfile(path) and 0 <= label < 3 and (off, length) == (0, 0)
    lst = tmp_path / "list.txt"
    lst.write_text("".join("%s\t%d\n" % (items[i][0], 5 + i) for i in (0, 1, 0)))
    ds = nostall.Dataset(str(lst))
    assert [ds[i][1] for i in range(3)] == [5, 6, 5] and len(ds.files()) == 2
    ds.close()
    with pytest.raises(ValueError):
        len(ds)


def test_errors(tmp_path):
    missing = str(tmp_path / "nope")
    with pytest.raises(nostall.Error, match="nope"):
        nostall.Dataset(missing)
    with pytest.raises(nostall.OptionError, match="did you mean crop"):
        nostall.Dataset(missing, crpo=3)
