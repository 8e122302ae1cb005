import struct, sys
# Turns the blk tracer's binary ftrace output (trace_pipe with options/bin) into the stream
# blkparse reads: ftrace puts pid (u32), cpu (u32) and a timestamp (u64) before each record;
# the record itself is a struct blk_io_trace (48 bytes) followed by pdu_len bytes. ftrace
# leaves the record's sequence number 0; it is set to a count from 1 per device and CPU, as
# blktrace's relay channels number their records (blkparse reports gaps in it as skips).
data = open(sys.argv[1], 'rb').read()
out = bytearray()
seq = {}
i = 0
while i + 16 + 48 <= len(data):
    rec = bytearray(data[i + 16:i + 16 + 48])
    magic, = struct.unpack_from('<I', rec, 0)
    assert magic & 0xffffff00 == 0x65617400, hex(magic)
    device, cpu = struct.unpack_from('<II', rec, 36)
    seq[device, cpu] = seq.get((device, cpu), 0) + 1
    struct.pack_into('<I', rec, 4, seq[device, cpu])
    pdu_len, = struct.unpack_from('<H', rec, 46)
    out += rec + data[i + 16 + 48:i + 16 + 48 + pdu_len]
    i += 16 + 48 + pdu_len
assert i == len(data), (i, len(data))
sys.stdout.buffer.write(out)
