"""The reading options (issue 22): logs, logPattern, per-log positions, times, minPartitions,
failOnDataLoss, and the first line of every option mistake. No Spark, no cluster."""

from __future__ import annotations

import json

import pytest

from metadata import LedgerId
from pyspark_ledger.datasource.errors import did_you_mean
from pyspark_ledger.datasource.options.read import check_stream_read
from pyspark_ledger.datasource.options.source_options import LedgerSourceOptions, OptionError, parse_options
from pyspark_ledger.log import Position

URI = "sqlite:///tmp/x/metadata.db"
LID = LedgerId(0, 7)
POS = {"seq": 3, "ledger": LID.qualified_name, "entry": 5}


def parse(**given: str) -> LedgerSourceOptions:
    return parse_options({"metadataserviceuri": URI, **{k.lower(): v for k, v in given.items()}})


def first_line(**given: str) -> str:
    with pytest.raises(OptionError) as err:
        parse(**given)
    return str(err.value).splitlines()[0]


def test_logs_and_pattern_choose_the_logs() -> None:
    o = parse_options({"logs": " orders, events ,orders"})
    assert o.read.logs == ("orders", "events") and o.log is None and o.read.log_pattern is None
    assert parse_options({"logs": "orders"}).log == "orders"  # one name: a log like option log
    p = parse_options({"logPattern": "ord.*"})
    assert p.read.logs == () and p.read.log_pattern == "ord.*"
    assert p.read.includes("orders") and not p.read.includes("xorders")  # the whole name must match
    assert parse_options({"log": "a"}).read.logs == ("a",)


def test_defaults_are_kafkas() -> None:
    r = parse_options({"log": "a"}).read
    assert (r.starting.kind, r.ending.kind, r.min_partitions, r.fail_on_data_loss) == ("earliest", "latest", None, True)


def test_positions_per_log_with_index_and_words() -> None:
    starting = {"orders": {**POS, "index": 2}, "events": "latest"}
    o = parse(logs="orders,events,clicks", startingPositions=json.dumps(starting), startingPosition="EARLIEST",
              endingPositions=json.dumps({"orders": POS}))
    r = o.read
    got = r.starting_for("orders")
    assert got.kind == "position" and got.position == Position(3, 5, LID) and got.index == 2
    assert r.starting_for("events").kind == "latest" and r.starting_for("clicks").kind == "earliest"
    assert r.ending_for("orders").position == Position(3, 5, LID) and r.ending_for("orders").index == 0
    assert r.ending_for("clicks").kind == "latest"


def test_timestamps_min_partitions_and_data_loss() -> None:
    r = parse(logPattern="a.*", startingTimestamp="1700000000000", endingTimestamp="1700000001000",
              minPartitions="8", failOnDataLoss="FALSE").read
    assert (r.starting.kind, r.starting.timestamp_ms, r.ending.timestamp_ms) == ("timestamp", 1700000000000, 1700000001000)
    assert (r.min_partitions, r.fail_on_data_loss) == (8, False)


@pytest.mark.parametrize(
    "given, line",
    [
        ({"log": "a", "statingPosition": "earliest"},
         'ledger data source option "statingposition": unknown option; did you mean "startingPosition"?'),
        ({"log": "a", "minPartition": "3"},
         'ledger data source option "minpartition": unknown option; did you mean "minPartitions"?'),
        ({"log": "a", "maxEntriesPerTriger": "3"},
         'ledger data source option "maxentriespertriger": unknown option; did you mean "maxEntriesPerTrigger"?'),
        ({"subscribe": "a"},
         'ledger data source option "subscribe": unknown option; that is an option of Spark\'s Kafka source, '
         'the ledger source uses "logs" instead'),
        ({"log": "a", "zzz": "1"}, 'ledger data source option "zzz": unknown option'),
        ({"log": "a", "startingPosition": '{"seq": 1, "ledger": "00"'},
         'ledger data source option "startingPosition": not valid JSON (Expecting \',\' delimiter: line 1 column 26 '
         '(char 25)); expected earliest, latest or a position like {"seq": 0, "ledger": "<32 hex digits>", "entry": 0}'),
        ({"logs": "a,b", "startingPositions": "{'a': 1}"},
         'ledger data source option "startingPositions": not valid JSON (Expecting property name enclosed in double '
         'quotes: line 1 column 2 (char 1)); expected {"<log>": {"seq": 0, "ledger": "<32 hex digits>", "entry": 0}, ...}'),
        ({"logs": "a,b", "startingPositions": json.dumps({"a": {"seq": 1, "entry": 0}})},
         'ledger data source option "startingPositions": log \'a\': not a log position: {\'seq\': 1, \'entry\': 0} '
         '(expected {"seq": n, "ledger": hex, "entry": n, "index": n}; index optional)'),
        ({"logs": "a,b", "startingPositions": json.dumps({"c": POS})},
         'ledger data source option "startingPositions": names log \'c\', which this read does not take (logs a, b)'),
        ({"logs": "orders,b", "endingPositions": json.dumps({"ordres": POS})},
         'ledger data source option "endingPositions": names log \'ordres\', which this read does not take '
         '(logs orders, b); did you mean "orders"?'),
        ({"logPattern": "a.*", "startingPosition": json.dumps(POS)},
         'ledger data source option "startingPosition": one position is for one log; with several logs give '
         'startingPositions as {"<log>": <position>, ...}'),
        ({"log": "a", "startingPosition": json.dumps(POS), "startingTimestamp": "5"},
         'ledger data source option "startingTimestamp": give one of startingTimestamp and startingPosition'),
        ({"log": "a", "endingTimestamp": "soon"},
         'ledger data source option "endingTimestamp": expected milliseconds since the epoch (an integer), got \'soon\''),
        ({"log": "a", "startingPosition": json.dumps({**POS, "index": -1})},
         'ledger data source option "startingPosition": seq, entry and index must be >= 0 in '
         f'{json.dumps({**POS, "index": -1})}'),
        ({"log": "a", "startingPosition": json.dumps({**POS, "row": 1})},
         'ledger data source option "startingPosition": unknown keys [\'row\'] in position '
         f'{json.dumps({**POS, "row": 1})}; expected {{"seq": 0, "ledger": "<32 hex digits>", "entry": 0}}'),
        ({"log": "a", "logs": "b"},
         'ledger data source option "log": give exactly one of log (a log name), logs (comma-separated names), '
         'logPattern (a regular expression over log names) and ledger (one ledger); got log and logs'),
        ({"logPattern": "a("},
         'ledger data source option "logPattern": not a regular expression: missing ), unterminated subpattern at '
         'position 1 in \'a(\''),
        ({"log": "a", "minPartitions": "0"}, 'ledger data source option "minPartitions": must be between 1 and 100000, got 0'),
        ({"log": "a", "failOnDataLoss": "maybe"},
         'ledger data source option "failOnDataLoss": expected true or false, got \'maybe\''),
        ({"ledger": "5", "startingTimestamp": "5"},
         'ledger data source option "startingTimestamp": times select ledgers of a log (option log, logs or logPattern), '
         'not a single ledger'),
    ],
)
def test_each_mistake_has_a_first_line_that_says_it(given: dict[str, str], line: str) -> None:
    assert first_line(**given) == line


def test_unknown_option_lists_the_known_ones_below_the_first_line() -> None:
    with pytest.raises(OptionError) as err:
        parse(log="a", startingOffsets="earliest")
    first, second = str(err.value).splitlines()
    assert first == ('ledger data source option "startingoffsets": unknown option; that is an option of Spark\'s Kafka '
                     'source, the ledger source uses "startingPosition" or "startingPositions" instead')
    assert second.startswith("known options: ") and "logPattern" in second and "minPartitions" in second


def test_did_you_mean_is_case_insensitive_and_quiet_when_nothing_is_close() -> None:
    assert did_you_mean("ENDINGPOSITIONS", ["endingPositions", "log"]) == '; did you mean "endingPositions"?'
    assert did_you_mean("qqq", ["endingPositions", "log"]) == ""


def test_a_stream_reads_logs_and_has_no_end() -> None:
    for given in ({"log": "a", "startingPosition": json.dumps(POS)}, {"logs": "a,b"}, {"logPattern": "a.*"},
                  {"log": "a", "startingTimestamp": "1"}, {"log": "a", "startingPositions": json.dumps({"a": POS})}):
        check_stream_read(parse_options(given).read)
    for given, option in [({"ledger": "7"}, "ledger"), ({"log": "a", "endingPosition": "earliest"}, "endingPosition"),
                          ({"log": "a", "endingTimestamp": "1"}, "endingTimestamp"),
                          ({"log": "a", "endingPositions": json.dumps({"a": POS})}, "endingPositions")]:
        with pytest.raises(OptionError) as err:
            check_stream_read(parse_options(given).read)
        assert err.value.option == option
