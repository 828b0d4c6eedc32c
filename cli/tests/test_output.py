"""The CLI's tables, records and JSON (cli/output.py): pure, no portal."""

import json

import click
import pytest
from click.testing import CliRunner

from cli.client import ApiError
from cli.output import cell, emit, output_option, record, table
from cli.session import Session

ROWS = [
    {"id": 7, "tenant": "team-a", "items": {"h100-80gb": 2}, "reasons": [], "auto": False},
    {"id": 12, "tenant": "team-vision", "items": {}, "reasons": ["over 2 units"], "auto": True},
]
COLUMNS = [
    ("id", "ID"),
    ("tenant", "TENANT"),
    ("items", "ITEMS"),
    ("reasons", "WHY"),
    ("auto", "AUTO"),
]


def test_a_table_aligns_numbers_right_and_text_left_under_its_header():
    assert table(ROWS, COLUMNS).splitlines() == [
        "ID  TENANT       ITEMS        WHY           AUTO",
        " 7  team-a       h100-80gb=2  -             no",
        "12  team-vision  -            over 2 units  yes",
    ]


def test_a_table_of_nothing_says_so():
    assert table([], COLUMNS, empty="no submitted requests") == "no submitted requests"


def test_cells_are_one_line_each():
    assert cell(None) == cell("") == cell([]) == cell({}) == "-"
    assert cell("two\nlines  and   blanks") == "two lines and blanks"
    assert cell({"a": 1, "b": None}) == "a=1, b=-"
    assert cell(["x", 2]) == "x; 2"
    assert cell(0) == "0" and cell(True) == "yes"


def test_dotted_columns_reach_into_objects_and_missing_ones_are_a_dash():
    rows = [{"slug": "team-a", "queue": {"pending": 3}}, {"slug": "team-b", "queue": None}]
    assert table(rows, [("slug", "TENANT"), ("queue.pending", "WAITING")]).splitlines() == [
        "TENANT  WAITING",
        "team-a        3",
        "team-b        -",
    ]


def test_a_record_is_one_label_a_line_aligned():
    text = record({"slug": "team-a", "monthly_budget": "5000.00", "quota": [1]})
    assert text.splitlines() == ["slug:           team-a", "monthly_budget: 5000.00"]
    text = record({"a": 1, "b": {"c": 2}}, [("a", "first"), ("b.c", "nested")])
    assert text.splitlines() == ["first:  1", "nested: 2"]


@click.group()
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def root(ctx, as_json):
    ctx.obj = Session(None, None, as_json)


@root.command()
@output_option()
@click.pass_context
def show(ctx, output):
    emit(ctx, output, ROWS, lambda: table(ROWS, COLUMNS))


@pytest.mark.parametrize(
    ("args", "as_json"),
    [
        (["show"], False),
        (["show", "--output", "table"], False),
        (["show", "-o", "json"], True),
        (["--json", "show"], True),  # the group's flag, as the other commands have it
        (["--json", "show", "--output", "table"], False),  # the command's own word wins
    ],
)
def test_output_is_a_table_unless_json_is_asked_for(args, as_json):
    result = CliRunner().invoke(root, args)
    assert result.exit_code == 0, result.output
    if as_json:
        assert json.loads(result.output) == ROWS
    else:
        assert result.output.startswith("ID  TENANT")


def test_an_api_error_carries_the_detail_and_each_fields_messages():
    exc = ApiError(
        400,
        {
            "code": "invalid",
            "detail": "the request has invalid fields",
            "errors": {"slug": ["tenant with this slug already exists."], "name": "required"},
        },
    )
    assert str(exc).splitlines() == [
        "400 invalid: the request has invalid fields",
        "  slug: tenant with this slug already exists.",
        "  name: required",
    ]


def test_control_and_bidi_characters_are_written_out_not_sent_to_the_terminal():
    """Security, third pass (7): a justification or name is another person's input; an escape
    sequence in it would clear or retitle the terminal printing the admin's table."""
    from cli.output import cell, table

    justification = "need GPUs\x1b[2J\x1b]0;pwned\x07 \u202egnp.exe"
    assert cell(justification) == "need GPUs\\x1b[2J\\x1b]0;pwned\\x07 \\u202egnp.exe"
    printed = table([{"why": justification}], [("why", "WHY")])
    assert "\x1b" not in printed and "\u202e" not in printed
    assert cell("plain text, accents é and 漢字") == "plain text, accents é and 漢字"
