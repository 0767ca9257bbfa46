"""tensorize.cli.registry_args: the shared --intrinsics-dir option."""

import argparse

import intrinsics
from tensorize.cli import registry_args


def test_the_option_names_the_registrys_environment_variable():
    assert registry_args.ENV_VAR == intrinsics.ENV_VAR


def test_the_option_repeats_and_defaults_to_none_given():
    parser = argparse.ArgumentParser()
    registry_args.add_registry_arguments(parser)
    assert parser.parse_args([]).intrinsics_dir == []
    assert parser.parse_args(["--intrinsics-dir", "a", "--intrinsics-dir", "b"]
                             ).intrinsics_dir == ["a", "b"]
