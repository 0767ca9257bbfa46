"""A model run's layer check: the shared comparison, worded for the run's records."""

import numpy as np

from tensorize.model.check import FLOAT_RTOL, compare


def test_equal_integer_layers_are_exact():
    values = np.arange(-8, 8, dtype=np.int8).reshape(4, 4)
    assert compare(values.copy(), values) == (True, "exact")


def test_an_integer_off_by_one_is_a_mismatch_naming_the_count_and_place():
    want = np.zeros((3, 5), dtype=np.int32)
    got = want.copy()
    got[2, 1] = 1
    ok, text = compare(got, want)
    assert not ok and text.startswith("MISMATCH") and "1 of 15" in text and "(2, 1)" in text


def test_a_float_output_is_judged_against_the_largest_reference_value():
    want = np.array([100.0, 1.0, -3.0], dtype=np.float32)
    inside = want + np.float32(0.5 * FLOAT_RTOL["float32"] * 100.0)
    outside = want + np.float32(2.0 * FLOAT_RTOL["float32"] * 100.0)
    assert compare(inside, want)[0]
    ok, text = compare(outside, want)
    assert not ok and text.startswith("MISMATCH")


def test_a_nan_where_the_reference_is_finite_is_a_mismatch():
    want = np.ones(4, dtype=np.float32)
    got = want.copy()
    got[3] = np.nan
    assert not compare(got, want)[0]


def test_a_float_output_for_an_integer_reference_is_a_mismatch():
    want = np.arange(4, dtype=np.int32)
    ok, text = compare(want.astype(np.float32), want)
    assert not ok and "dtype" in text


def test_a_float16_output_may_lie_four_units_of_its_largest_value_from_the_reference():
    # The largest magnitude, 1.0, has float16 units of 2**-10: four of them pass, five do not.
    want = np.array([-1.0, 0.75, 0.001], dtype=np.float16)
    unit = np.float16(2.0 ** -10)
    ok, text = compare(want + 4 * unit, want)
    assert ok and "(tolerance 0.00390625)" in text
    ok, text = compare(want + 5 * unit, want)
    assert not ok and text.startswith("MISMATCH max error")


def test_a_failed_kernel_check_fails_the_layer_and_leads_its_text():
    values = np.array([1.0, 2.0], dtype=np.float16)
    ok, text = compare(values, values, (False, "kernel 1 of 2 elements differ"))
    assert not ok
    assert text == ("MISMATCH kernel 1 of 2 elements differ; against onnxruntime: max error "
                    "0.00e+00 of the largest value (tolerance 0.00390625)")
    assert compare(values, values, (True, "kernel exact"))[0]
