"""auditC: fuzz BatchAccumulator against an independent spec decoder."""
import random, struct, sys
import numpy as np, pyarrow as pa
import google_crc32c
from txkafka.connector.client.record_batch_encoder import BatchAccumulator, encode_batch
from txkafka.connector.client.record_batch_decoder import HEADERS_TYPE

def rd_uvarint(b, i):
    shift = v = 0
    while True:
        x = b[i]; i += 1
        v |= (x & 0x7F) << shift; shift += 7
        if not x & 0x80: return v, i
def rd_varint(b, i):
    v, i = rd_uvarint(b, i)
    return (v >> 1) ^ -(v & 1), i

def decode_batch(w):
    (base, length, lep, magic) = struct.unpack_from(">qiib", w, 0)
    (crc,) = struct.unpack_from(">I", w, 17)
    attrs, lod, bts, mts, pid, pep, seq, cnt = struct.unpack_from(">hiqqqhii", w, 21)
    assert length == len(w) - 12, (length, len(w))
    assert crc == google_crc32c.value(bytes(w[21:])), "crc"
    assert magic == 2 and attrs & 7 == 0
    i = 61; recs = []
    for r in range(cnt):
        ln, i = rd_varint(w, i); end = i + ln
        a = w[i]; i += 1
        tsd, i = rd_varint(w, i); od, i = rd_varint(w, i)
        kl, i = rd_varint(w, i); k = None if kl < 0 else bytes(w[i:i+kl]); i += max(kl, 0)
        vl, i = rd_varint(w, i); v = None if vl < 0 else bytes(w[i:i+vl]); i += max(vl, 0)
        hc, i = rd_varint(w, i); hs = []
        for _ in range(hc):
            hkl, i = rd_varint(w, i); hk = bytes(w[i:i+hkl]).decode(); i += hkl
            hvl, i = rd_varint(w, i); hv = None if hvl < 0 else bytes(w[i:i+hvl]); i += max(hvl, 0)
            hs.append((hk, hv))
        assert i == end, ("record length", i, end)
        assert od == r, ("offset delta", od, r)
        recs.append((bts + tsd, k, v, tuple(hs)))
    assert i == len(w), "trailing"
    assert lod == cnt - 1
    assert mts == max(r[0] for r in recs), ("max_ts", mts, max(r[0] for r in recs))
    assert bts == recs[0][0], ("base ts is first record's", bts, recs[0][0])
    return recs

def run(seed):
    rng = random.Random(seed)
    nparts = rng.choice([1, 2, 3, 7])
    batch_bytes = rng.choice([200, 1000, 5000, 70000, 1_000_000])
    maxb = rng.choice([batch_bytes, 1_000_000])
    acc = BatchAccumulator("t", nparts, batch_bytes=batch_bytes, max_batch_bytes=max(maxb, 100_000), rng=rng)
    expected = {}  # partition -> list
    sealed = []
    ts0 = 1_700_000_000_000
    uid = 0
    for call in range(rng.randint(1, 6)):
        n = rng.randint(1, 300)
        big = rng.random() < 0.3
        vals, keys, hdrs, parts = [], [], [], []
        for _ in range(n):
            uid += 1
            sz = rng.choice([0, 1, 10, 200, 20000 if big else 50, 70000 if big else 100])
            v = None if rng.random() < 0.05 else (b"%d:" % uid) + bytes(rng.getrandbits(8) for _ in range(min(sz, 50))) * (sz // 50 + 1)
            vals.append(v)
            keys.append(None if rng.random() < 0.3 else b"k%d" % rng.randint(0, 50))
            hdrs.append(None if rng.random() < 0.5 else [{"key": "h%d" % j, "value": None if rng.random() < 0.3 else b"x" * j} for j in range(rng.randint(0, 3))])
            parts.append(None if rng.random() < 0.5 else rng.randrange(nparts))
        uk = rng.random() < 0.7; uh = rng.random() < 0.5; up = rng.random() < 0.5
        ts = ts0 + call * rng.choice([0, 1, 1000, -5, 10**9])
        kv = pa.array(keys, pa.binary()) if uk else None
        hv = pa.array(hdrs, HEADERS_TYPE) if uh else None
        pv = pa.array(parts, pa.int32()) if up else None
        va = pa.array(vals, pa.binary())
        if rng.random() < 0.3:  # a slice
            off = rng.randint(0, n - 1)
            va, kv, hv, pv = (x.slice(off) if x is not None else None for x in (va, kv, hv, pv))
            vals, keys, hdrs, parts = vals[off:], keys[off:], hdrs[off:], parts[off:]
        before = len(acc.sealed)
        placed = acc.place(kv, pv, np.ones(len(va), dtype=np.int64)) if False else None
        acc.append(kv, va, headers=hv, partitions=pv, timestamp_ms=ts)
        for i, v in enumerate(vals):
            expected.setdefault("all", []).append((ts, keys[i] if uk else None, v,
                tuple((h["key"], h["value"]) for h in hdrs[i]) if uh and hdrs[i] else (), parts[i] if up else None))
    acc.drain()
    got = []
    by_part = {}
    for sb in acc.sealed:
        w = encode_batch(sb, codec=0, producer_id=5, producer_epoch=1, base_sequence=0, transactional=True)
        assert len(w) <= acc.max_batch_bytes, (len(w), acc.max_batch_bytes)
        recs = decode_batch(memoryview(w))
        if len(recs) > 1:
            assert sb.size <= acc.cap, ("over cap with >1 records", sb.size, acc.cap)
        by_part.setdefault(sb.partition, []).extend(recs)
    # multiset check and explicit partitions
    allrecs = [r for p, rs in by_part.items() for r in rs]
    exp = expected["all"]
    assert sorted(map(repr, allrecs)) == sorted(repr(e[:4]) for e in exp), "records differ"
    # explicit partitions honoured: values unique per uid prefix
    where = {r[2]: p for p, rs in by_part.items() for r in rs if r[2] is not None}
    for e in exp:
        if e[4] is not None and e[2] is not None:
            assert where[e[2]] == e[4]
    # order within partition = call order
    order = {e[2]: i for i, e in enumerate(exp) if e[2] is not None}
    for p, rs in by_part.items():
        idx = [order[r[2]] for r in rs if r[2] is not None]
        assert idx == sorted(idx), ("order", p)

bad = 0
for s in range(int(sys.argv[1]) if len(sys.argv) > 1 else 300):
    try:
        run(s)
    except AssertionError as e:
        bad += 1
        if bad < 6: print("seed", s, "FAIL", str(e)[:200])
    except Exception as e:
        bad += 1
        if bad < 6: print("seed", s, "ERROR", type(e).__name__, str(e)[:200])
print("failures", bad)
