# A rough SPIR-V disassembler for modules with cooperative-matrix instructions, which Debian's
# spirv-dis (2023.1) cannot read: opcode names from the `spirv` crate naga uses (its
# autogen_spirv.rs), ids named by OpName (so a literal that equals a named id prints as that
# name: read literals with care). Usage:
#   python3 experiments/coop-probe/spv-dis.py ~/.cargo/registry/src/*/spirv-0.4.0+*/autogen_spirv.rs FILE.spv
# Dumps of the engine's kernels: FAK_PORTABILITY_DUMP=<dir> on the gpu group's portability test.
import re, struct, sys
src = open(sys.argv[1]).read()
# Op enum: find "pub enum Op {" block
m = re.search(r"pub enum Op \{(.*?)\n\}", src, re.S)
ops = {}
for name, val in re.findall(r"\n\s+(\w+) = (\d+)u32,", m.group(1)):
    ops.setdefault(int(val), name)
data = open(sys.argv[2], 'rb').read()
w = struct.unpack('<%dI' % (len(data)//4), data)
names = {}
i = 5
insts = []
while i < len(w):
    wc, op = w[i] >> 16, w[i] & 0xffff
    ops_ = w[i+1:i+wc]
    insts.append((op, ops_))
    if ops.get(op) == 'Name':
        s = b''.join(struct.pack('<I', x) for x in ops_[1:]).split(b'\0')[0].decode()
        names[ops_[0]] = s
    i += wc
def n(x):
    return '%' + names[x] if x in names else '%' + str(x)
# ops with result type + result id
tr = set()
for op,_ in insts: pass
NO_TYPE_RESULT = {'Type','Name','MemberName','Decorate','MemberDecorate','Capability','Extension','ExtInstImport','MemoryModel','EntryPoint','ExecutionMode','Store','Branch','BranchConditional','SelectionMerge','LoopMerge','Return','ReturnValue','ControlBarrier','MemoryBarrier','FunctionEnd','Label','Source','CooperativeMatrixStoreKHR','Switch','Kill','Unreachable','ExecutionModeId','DecorateString','String','Line','NoLine'}
for op, o in insts:
    name = ops.get(op, 'Op%d' % op)
    if name in ('Name','MemberName'):
        continue
    if name.startswith('Type') or name == 'Label' or name == 'ExtInstImport' or name=='String':
        print('%s = Op%s %s' % (n(o[0]), name, ' '.join(n(x) if name.startswith('Type') and x>10 else str(x) for x in o[1:])))
    elif name in NO_TYPE_RESULT or name.startswith('Decorate'):
        print('      Op%s %s' % (name, ' '.join(n(x) for x in o)))
    elif len(o) >= 2:
        print('%s = Op%s %s %s' % (n(o[1]), name, n(o[0]), ' '.join(n(x) for x in o[2:])))
    else:
        print('      Op%s %s' % (name, ' '.join(n(x) for x in o)))
