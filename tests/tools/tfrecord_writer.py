"""Pieces for writing TFRecord files of tf.train.Example records in the
test data generators (make_bad_data.py, make_drift_data.py): the masked
CRC-32C of the record framing and length-delimited protobuf fields.
"""

# CRC-32C (Castagnoli), reflected polynomial 0x82F63B78, one table lookup
# per byte.
_TABLE = []
for n in range(256):
    c = n
    for _ in range(8):
        c = (c >> 1) ^ (0x82F63B78 if c & 1 else 0)
    _TABLE.append(c)


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc = _TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked(data):
    """The masked CRC-32C a TFRecord frame stores for `data`."""
    c = crc32c(data)
    return ((((c >> 15) | (c << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def varint(n):
    out = b""
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


def field(num, payload):
    """A length-delimited protobuf field."""
    return varint(num << 3 | 2) + varint(len(payload)) + payload
