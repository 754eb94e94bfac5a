package tablefile

// Classic table file layout (Dolt/NBS), big-endian throughout:
//
//	+----------------+-----+------------------+-------+--------+
//	| chunk record 0 | ... | chunk record N-1 | index | footer |
//	+----------------+-----+------------------+-------+--------+
//
//	record  = snappy block(chunk) ‖ CRC-32C(snappy block) as u32
//	index   = N × {prefix u64, ordinal u32}   sorted by prefix
//	        ‖ N × length u32                  by ordinal (file order)
//	        ‖ N × suffix [12]byte             by ordinal
//	footer  = count u32 ‖ uncompressed bytes u64 ‖ magic [8]byte
//
// The file's name is base32(SHA-512(suffix section)[:20]).
const (
	magic = "\xff\xb5\xd8\xc2\x24\x63\xee\x50"

	crcSize       = 4
	prefixSize    = 8
	ordinalSize   = 4
	lengthSize    = 4
	suffixSize    = 12
	tupleSize     = prefixSize + ordinalSize
	perChunkIndex = tupleSize + lengthSize + suffixSize // 28

	footerSize          = 20 // count + uncompressed + magic
	footerCountOff      = 0
	footerUncompressOff = 4
	footerMagicOff      = 12

	// maxChunkLen bounds one stored record; Dolt chunks are small (tens of
	// KiB) and a larger length is taken as corruption.
	maxChunkLen = 1 << 30
)

// Dolt archive (.darc) layout, see archive.go:
//
//	+-------------+-----+-------------+-------+----------+--------+
//	| byte span 1 | ... | byte span S | index | metadata | footer |
//	+-------------+-----+-------------+-------+----------+--------+
const (
	archiveSignature   = "DOLTARC"
	archiveFooterV3    = 220
	archiveFooterV1    = 216
	archiveVersionOff  = 8 // from the end
	archiveMaxFooter   = archiveFooterV3
	maxTailRead        = archiveMaxFooter
	archiveDigestsSize = 3 * 64
)

// Format says which of the table-file formats a file uses.
type Format int

// The formats chunkd reads. Values are never written to disk.
const (
	FormatUnknown Format = iota
	// FormatClassic is Dolt's (originally Noms') table file: snappy records
	// with CRC-32C and a prefix-sorted index.
	FormatClassic
	// FormatArchiveV1 is the first archive format: zstd chunks with
	// dictionaries, 32-bit index length.
	FormatArchiveV1
	// FormatArchiveV2 adds snappy spans (dictionary id 0).
	FormatArchiveV2
	// FormatArchiveV3 widens the index length to 64 bits.
	FormatArchiveV3
)

func (f Format) String() string {
	switch f {
	case FormatClassic:
		return "classic"
	case FormatArchiveV1:
		return "archive-v1"
	case FormatArchiveV2:
		return "archive-v2"
	case FormatArchiveV3:
		return "archive-v3"
	}
	return "unknown"
}

// IsArchive reports whether f is one of the archive versions.
func (f Format) IsArchive() bool { return f >= FormatArchiveV1 && f <= FormatArchiveV3 }
