# corpus: a TE-style file whose build() raises
# args: run {file} --target npu
# expect: {file}: build() failed: ZeroDivisionError: integer division or modulo by zero (line 8)


def build():
    rows = 0
    return 256 // rows
