import pytest

from dsgd_sim.units import (format_bandwidth_bps, format_bytes, format_count, format_rate_Bps,
                            format_time, parse_bandwidth, parse_count, parse_size, parse_time)


@pytest.mark.parametrize("text, bits_per_s", [
    ("10Gbps", 10e9), ("100Mbit/s", 100e6), ("1.25GB/s", 10e9), ("400Gbps", 400e9),
    ("100MiB/s", 100 * 2**20 * 8), ("1.5 Gb/s", 1.5e9), ("800kbps", 800e3),
])
def test_bandwidth_parses_bits_and_bytes(text, bits_per_s):
    assert parse_bandwidth(text) == pytest.approx(bits_per_s, rel=1e-12)


def test_ten_gigabit_is_one_and_a_quarter_gigabytes_per_second():
    assert parse_bandwidth("10Gbps") == parse_bandwidth("1.25GB/s")


@pytest.mark.parametrize("text, seconds", [
    ("5us", 5e-6), ("0.5ms", 5e-4), ("80ms", 0.08), ("1s", 1.0), ("250ns", 250e-9), ("0", 0.0),
    ("2min", 120.0),
])
def test_time_parses(text, seconds):
    assert parse_time(text) == pytest.approx(seconds, rel=1e-12)


@pytest.mark.parametrize("text, n_bytes", [
    ("25MB", 25_000_000), ("100MiB", 100 * 2**20), ("64KB", 64_000), ("64KiB", 65_536),
    ("512B", 512), ("0", 0), ("1GB", 10**9),
])
def test_size_distinguishes_si_and_binary_prefixes(text, n_bytes):
    assert parse_size(text) == n_bytes


@pytest.mark.parametrize("text, count", [("25M", 25_000_000), ("1.5B", 1_500_000_000),
                                         ("340000", 340_000), ("7K", 7_000)])
def test_count_parses(text, count):
    assert parse_count(text) == count


@pytest.mark.parametrize("parse, text", [
    (parse_bandwidth, "10"), (parse_bandwidth, "10Gbpx"), (parse_bandwidth, ""),
    (parse_bandwidth, "nan"), (parse_bandwidth, "-1Gbps"), (parse_bandwidth, "inf Gbps"),
    (parse_time, "80"), (parse_time, "80 parsecs"), (parse_time, "NaNms"),
    (parse_size, "25"), (parse_size, "25Mb"), (parse_size, "0.5B"), (parse_count, "25X"),
    (parse_count, "1.5"),
])
def test_bad_quantities_raise_with_the_text(parse, text):
    with pytest.raises(ValueError) as error:
        parse(text)
    assert repr(text) in str(error.value)


def test_formatting_uses_readable_units():
    assert format_bytes(102_228_128) == "102 MB"
    assert format_time(0.0123) == "12.3 ms"
    assert format_time(5e-6) == "5 us"
    assert format_rate_Bps(1.25e9) == "1.25 GB/s"
    assert format_bandwidth_bps(1e10) == "10 Gbps"


def test_the_largest_sizes_it_parses_print_in_their_own_unit():
    # 1PB parses, so it prints as 1 PB, not "1e+03 TB"; its 2.5e14 parameters as 250T
    assert format_bytes(parse_size("1PB")) == "1 PB"
    assert format_count(parse_size("1PB") / 4) == "250T"
    assert format_count(25_557_032) == "25.6M"


@pytest.mark.parametrize("parse,text", [(parse_size, "1e300PB"), (parse_count, "1e300T"),
                                        (parse_bandwidth, "1e300PB/s"), (parse_time, "1e307h")])
def test_a_finite_number_that_overflows_with_its_unit_is_refused(parse, text):
    with pytest.raises(ValueError, match=r"^not a finite \w+: '1e30"):
        parse(text)


@pytest.mark.parametrize("text", ["１０MB", "٣KB"])
def test_digits_other_than_ascii_are_not_a_number(text):
    with pytest.raises(ValueError, match="not a size"):
        parse_size(text)
