# corpus: a TE-style file whose build() returns something else
# args: run {file} --target npu
# expect: {file}: build() requires to return a PrimFunc, got a dict


def build():
    return {"gemm": None}
