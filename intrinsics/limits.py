"""How big a description may be: the bounds that keep loading and self-checking it cheap.

A description comes from whoever wrote the file, and every ``tensorize`` command that sees it
(``intrinsics validate``, ``run`` with ``--intrinsics-dir``) reads it, so its size must not
decide how long they take or how much memory they use. Each bound is far above what a real
family needs: the largest built-in (``cuda.yaml``) is 11 KB, 1,900 nodes once its aliases are
expanded, 21,000 nodes and 98 intrinsics once its variants are, 6 levels deep, with tiles of
at most 256 elements and 4,096 iteration points.
"""

# PyYAML's pure-Python reader takes about 2 ms per KB: 256 KiB parse in about half a second.
MAX_DOCUMENT_BYTES = 256 * 1024

# Nodes once every alias is expanded (an alias counts the whole node it names). Aliases
# share structure, so without this bound a 4 KB file of 9 levels of 9 aliases ("billion
# laughs") stands for 9**9 nodes, which every later walk of the tree would visit.
MAX_NODES = 50_000

# Levels of nested mappings and lists. PyYAML composes recursively, about three Python
# frames per level, so 500 nested brackets would exhaust the interpreter's stack.
MAX_DEPTH = 32

# Nodes once every entry is copied for each of its variants, and the intrinsics those
# copies make: substituting, schema-checking and building each costs time per node and
# about a millisecond per intrinsic.
MAX_VARIANT_NODES = 250_000
MAX_INTRINSICS = 1024

# Elements of one operand's tile, and points of one intrinsic's iteration space: the
# self-check allocates each operand and runs the semantics over the whole space (a 20000^3
# tile would take minutes and gigabytes). 2**16 elements is a 256 x 256 tile.
MAX_OPERAND_ELEMENTS = 1 << 16
MAX_ITERATIONS = 1 << 20

# Characters and expression nesting of one semantics statement. The IR is walked recursively
# (parsing, checking, lowering, executing), a few Python frames per level; a statement the
# length of the document could nest thousands of levels and exhaust the interpreter's stack.
# The longest built-in statement has 206 characters and nests 15 levels.
MAX_SEMANTICS_CHARS = 2000
MAX_SEMANTICS_DEPTH = 64

# Iteration points of all of a family's compute intrinsics together: what one self-check
# runs (about a second of the reference executor).
MAX_FAMILY_ITERATIONS = 1 << 24

# ---- a CPU target's ``cpu:`` section --------------------------------------------------------
# Its numbers size the work of every kernel compiled for it: the schedule tries each register
# tile (rows by vectors) and, with --tune, compiles and runs the kernel once per tile and per
# tune CPU; the micro-kernel unrolls k_unroll k steps; the runners over-allocate every buffer
# by `alignment` bytes. The built-ins use at most 64-byte vectors, 32 registers, 8 rows and 4
# vectors of tile choices, k_unroll 4, 2 tune CPUs, 5 features and 6 counted mnemonics.
MAX_VECTOR_BYTES = 1024  # 8192-bit vectors (RISC-V V allows them; SVE stops at 2048 bits)
MAX_CPU_REGISTERS = 256  # the register scope's capacity over vector_bytes
MAX_CPU_ALIGNMENT = 4096  # a page
MAX_K_UNROLL = 64
MAX_TILE_CHOICES = 16  # entries of register_tile.rows and of register_tile.vectors
MAX_TUNE_CPUS = 16
MAX_CPU_FEATURES = 64  # features, an emulator's executes, cpuinfo names
MAX_MACS_ENTRIES = 64
MAX_MACS = 1 << 20  # multiply-accumulates of one instruction (AMX's TDPBSSD does 16,384)
# Characters of a triple, a CPU name and a feature name (LLVM's longest are about 40).
MAX_LLVM_NAME = 64
