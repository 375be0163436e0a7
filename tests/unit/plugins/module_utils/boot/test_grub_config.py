"""grub_config: GRUB's files evaluated by /bin/sh the way grub-mkconfig sources them, and where words are."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from ansible_collections.confidential.tee.plugins.module_utils.boot import grub_config as gc
from ansible_collections.confidential.tee.plugins.module_utils.common.process import Completed


def evaluate(main, **dropins):
    files = {gc.GRUB_MAIN: main, **{f"{gc.GRUB_DIR}/{name}": text for name, text in dropins.items()}}
    return gc.evaluate(files)


@pytest.mark.parametrize(
    ("main", "linux", "raws"),
    [
        ('GRUB_CMDLINE_LINUX="a b"\n', "a b", ["a", "b"]),
        ("GRUB_CMDLINE_LINUX='a  b'\n", "a  b", ["a", "b"]),
        ('GRUB_CMDLINE_LINUX="a \\\n b"\n', "a  b", ["a", "b"]),  # backslash-newline continues the line
        ('GRUB_CMDLINE_LINUX="a\nb"\n', "a\nb", ["a", "b"]),  # a value over two lines
        ('GRUB_CMDLINE_LINUX="foo=\\"a b\\" c"\n', 'foo="a b" c', ['foo="a b"', "c"]),
        ('X=1\nGRUB_CMDLINE_LINUX="${X:+x=$X }y"\n', "x=1 y", ["x=1", "y"]),
        ('GRUB_CMDLINE_LINUX="$(echo sub)stituted"\n', "substituted", ["substituted"]),
        ("GRUB_CMDLINE_LINUX=plain # comment\n", "plain", ["plain"]),
    ],
)
def test_values_are_what_the_shell_makes_of_them(main, linux, raws):
    value = evaluate(main)
    assert value.linux == linux
    assert value.raws() == raws


def test_dropins_are_sourced_after_the_main_file_in_glob_order():
    value = evaluate(
        'GRUB_CMDLINE_LINUX="base"\nGRUB_CMDLINE_LINUX_DEFAULT="quiet"\n',
        **{
            "50-b.cfg": 'GRUB_CMDLINE_LINUX="$GRUB_CMDLINE_LINUX b"\n',
            "10-a.cfg": 'GRUB_CMDLINE_LINUX="$GRUB_CMDLINE_LINUX a"\n',
        },
    )
    assert value.line == "base a b quiet"


def test_output_printed_by_the_files_is_ignored():
    assert evaluate('echo hello\nprintf "\\0"\nGRUB_CMDLINE_LINUX="x"\n').linux == "x"


def test_the_environment_is_clean():
    # A variable exported by whoever runs the module must not leak into the evaluation.
    assert evaluate('GRUB_CMDLINE_LINUX="${HOME:-unset} ${ANSIBLE_CONFIG:-unset}"\n').linux == "unset unset"


@pytest.mark.parametrize(
    ("main", "fragment"),
    [
        ('GRUB_CMDLINE_LINUX="unterminated\n', r"failed \(exit 2\)"),
        ("false\n", r"failed \(exit 1\)"),  # grub-mkconfig runs under set -e
        ("exit 0\n", "ended before"),
    ],
)
def test_files_the_shell_cannot_evaluate_are_errors(main, fragment):
    with pytest.raises(gc.GrubError, match=fragment):
        evaluate(main)


def test_a_hanging_file_times_out(monkeypatch):
    monkeypatch.setattr(gc, "EVALUATION_TIMEOUT", 1)
    with pytest.raises(gc.GrubError, match="took longer than 1 s"):
        evaluate("sleep 30\n")


def test_a_runner_that_cannot_start_is_an_error():
    def broken(*args, **kwargs):
        raise OSError(2, "No such file or directory")

    with pytest.raises(gc.GrubError, match="cannot run /bin/sh"):
        gc.evaluate({gc.GRUB_MAIN: ""}, runner=broken)


def test_parse_output_rejects_truncated_output():
    done = Completed(["sh"], 0, b"m\nonly-one\0", b"")
    with pytest.raises(gc.GrubError, match="unexpected output"):
        gc._parse_output(done, "m", ["/etc/default/grub"])


def test_source_order_is_the_glob_order():
    names = ["b.cfg", ".hidden.cfg", "A.cfg", "x.cfg~", "a.cfg", "90-tee.cfg"]
    assert gc.source_order(names) == ["90-tee.cfg", "A.cfg", "a.cfg", "b.cfg"]


def test_assignments_cover_quoted_multiline_values():
    text = "A=1\nGRUB_CMDLINE_LINUX=\"a \\\n b\"  # c\nexport GRUB_CMDLINE_LINUX_DEFAULT='q'\n"
    found = gc.assignments(text)
    assert [(var, text[start:end]) for var, start, end in found] == [
        ("GRUB_CMDLINE_LINUX", '"a \\\n b"'),
        ("GRUB_CMDLINE_LINUX_DEFAULT", "'q'"),
    ]


def test_occurrences_find_whole_words_and_escaped_spellings():
    text = 'GRUB_CMDLINE_LINUX="tdx=1 kvm_intel.tdx=1 foo=\\"a b\\""\n'
    assert gc.occurrences(text, "tdx=1") == [(20, 25)]
    (start, end) = gc.occurrences(text, 'foo="a b"')[0]
    assert text[start:end] == 'foo=\\"a b\\"'
    assert gc.occurrences('OTHER="tdx=1"\n', "tdx=1") == []


def test_without_span_takes_one_neighbouring_blank():
    assert gc.without_span('X="a b c"', 5, 6) == 'X="a c"'
    assert gc.without_span('X="a b"', 3, 4) == 'X="b"'


def test_dropin_round_trip_and_hand_edits_refused():
    text = gc.dropin_text("90-tee", ["kvm_intel.tdx=1", "nohibernate"])
    assert gc.dropin_args("/etc/default/grub.d/90-tee.cfg", text) == ["kvm_intel.tdx=1", "nohibernate"]
    assert evaluate('GRUB_CMDLINE_LINUX="ro"\n', **{"90-tee.cfg": text}).raws() == [
        "ro",
        "kvm_intel.tdx=1",
        "nohibernate",
    ]
    with pytest.raises(gc.GrubError, match="changed by hand"):
        gc.dropin_args("/etc/default/grub.d/90-tee.cfg", text + 'GRUB_CMDLINE_LINUX="x"\n')


GRUB_MKCONFIG = Path("/usr/sbin/grub-mkconfig")


def real_sourcing_block() -> str:
    """The lines of the installed grub-mkconfig that source /etc/default/grub and grub.d/*.cfg."""
    lines = GRUB_MKCONFIG.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("if test -f ${sysconfdir}/default/grub"))
    end = next(i for i in range(start, len(lines)) if lines[i].strip() == "done")
    return "\n".join(lines[start : end + 1])


@pytest.mark.skipif(not GRUB_MKCONFIG.exists(), reason="grub2-common is not installed (scripts/sysdeps.sh installs it)")
@pytest.mark.parametrize(
    ("main", "dropins"),
    [
        ('GRUB_CMDLINE_LINUX="a \\\n b foo=\\"x y\\""\nGRUB_CMDLINE_LINUX_DEFAULT="quiet"\n', {}),
        (
            'GRUB_CMDLINE_LINUX="base"\n',
            {"50-x.cfg": 'GRUB_CMDLINE_LINUX="${GRUB_CMDLINE_LINUX:+$GRUB_CMDLINE_LINUX }x"\n'},
        ),
        ('X=`echo sub`\nGRUB_CMDLINE_LINUX="$X"\n', {"10-a.cfg": "GRUB_CMDLINE_LINUX_DEFAULT=d\n", "9.cfg": "Y=1\n"}),
    ],
)
def test_evaluation_matches_the_installed_grub_mkconfig(tmp_path, main, dropins):
    """Run the real grub-mkconfig's own sourcing lines over the same files and compare the values."""
    etc = tmp_path / "etc"
    (etc / "default/grub.d").mkdir(parents=True)
    (etc / "default/grub").write_text(main)
    for name, text in dropins.items():
        (etc / "default/grub.d" / name).write_text(text)
    script = f'set -e\nsysconfdir="{etc}"\n{real_sourcing_block()}\n'
    script += 'printf "%s\\0%s" "$GRUB_CMDLINE_LINUX" "$GRUB_CMDLINE_LINUX_DEFAULT"\n'
    done = subprocess.run(["/bin/sh", "-c", script], capture_output=True, env={"PATH": "/usr/bin:/bin"}, check=True)
    linux, default = done.stdout.decode().split("\0")
    ours = evaluate(main, **dropins)
    assert (ours.linux, ours.default) == (linux, default)
