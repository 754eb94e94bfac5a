/*
 * Reading a page from a SlotFile (see slots.go) without calling into Go:
 * the slot's entry says whether it is filled and gives the CRC-32C of its
 * bytes; xRead preads the slot into SQLite's buffer and checks the CRC
 * there, so that no byte that fails its check is handed to SQLite as
 * read. Anything else (a slot not filled, a short read, a CRC that does
 * not match, a read that is not one whole page) is left to Go.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shim.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <nmmintrin.h>
#endif

/* Entries are snapshotted in blocks of this many (one 4 KiB pread). */
#define ENTRY_BLOCK 512

struct chunkd_slots {
	int data_fd;
	int entries_fd;
	int slot_size;
	int64_t slots;
	uint64_t filled; /* the bit of an entry that marks its slot filled */
	/* A copy of the entries, read a block at a time: a filled entry never
	 * changes (its CRC is that of the proven bytes), so a copy can only be
	 * stale in saying "not filled", which is read again before giving up. */
	uint64_t *entries;
	uint8_t *loaded; /* a byte per block: its entries were read */
	int64_t *reads;      /* counters in (pinned) Go memory, or NULL */
	int64_t *pages_read;
	int gone;            /* set once the image is unregistered */
	int lane;            /* bytes of each of the CRC's three lanes */
	uint32_t shift[4][256]; /* appends lane zero bytes to a CRC register */
};

#if defined(__x86_64__)

int chunkd_crc32c_hw(void) {
	static int hw = -1;
	if (hw < 0) {
		unsigned a, b, c, d;
		hw = __get_cpuid(1, &a, &b, &c, &d) && (c & bit_SSE4_2) != 0;
	}
	return hw;
}

static inline uint64_t load64(const unsigned char *p) {
	uint64_t v;
	memcpy(&v, p, 8);
	return v;
}

/* crcRaw updates the CRC-32C register crc (no pre- or post-inversion)
 * with n bytes at p. */
__attribute__((target("sse4.2"))) static uint32_t crcRaw(uint32_t crc, const unsigned char *p, size_t n) {
	uint64_t c = crc;
	for (; n >= 8; n -= 8, p += 8) {
		c = _mm_crc32_u64(c, load64(p));
	}
	crc = (uint32_t)c;
	for (; n > 0; n--, p++) {
		crc = _mm_crc32_u8(crc, *p);
	}
	return crc;
}

/* initShift fills s->shift for s->lane: the register's update by lane
 * zero bytes is linear in the register, so it is the XOR of its values on
 * the register's 32 bits, looked up a byte at a time. */
__attribute__((target("sse4.2"))) static void initShift(struct chunkd_slots *s) {
	uint32_t basis[32];
	for (int k = 0; k < 32; k++) {
		uint64_t c = 1u << k;
		for (int i = 0; i < s->lane; i += 8) {
			c = _mm_crc32_u64(c, 0);
		}
		basis[k] = (uint32_t)c;
	}
	for (int j = 0; j < 4; j++) {
		s->shift[j][0] = 0;
		for (int v = 1; v < 256; v++) {
			s->shift[j][v] = s->shift[j][v & (v - 1)] ^ basis[8 * j + __builtin_ctz(v)];
		}
	}
}

static inline uint32_t shifted(const struct chunkd_slots *s, uint32_t c) {
	return s->shift[0][c & 0xff] ^ s->shift[1][(c >> 8) & 0xff] ^ s->shift[2][(c >> 16) & 0xff] ^ s->shift[3][c >> 24];
}

/* slotCRC is the CRC-32C (Castagnoli, as Go's crc32.Checksum with
 * crc32.MakeTable(crc32.Castagnoli)) of a slot's bytes: three lanes at
 * once, which the instruction's latency would otherwise leave waiting,
 * joined with the shift tables, then the tail. */
__attribute__((target("sse4.2"))) static uint32_t slotCRC(const struct chunkd_slots *s, const unsigned char *p) {
	const int L = s->lane;
	uint64_t a = 0xffffffffu, b = 0, c = 0;
	for (int i = 0; i < L; i += 8) {
		a = _mm_crc32_u64(a, load64(p + i));
		b = _mm_crc32_u64(b, load64(p + L + i));
		c = _mm_crc32_u64(c, load64(p + 2 * L + i));
	}
	uint32_t crc = shifted(s, (uint32_t)a) ^ (uint32_t)b;
	crc = shifted(s, crc) ^ (uint32_t)c;
	return ~crcRaw(crc, p + 3 * L, (size_t)(s->slot_size - 3 * L));
}

#else

int chunkd_crc32c_hw(void) { return 0; }

static void initShift(struct chunkd_slots *s) {}

static uint32_t slotCRC(const struct chunkd_slots *s, const unsigned char *p) { return 0; }

#endif

chunkd_slots *chunkd_slots_new(int data_fd, int entries_fd, int slot_size, int64_t slots, uint64_t filled, int64_t *reads, int64_t *pages_read) {
	struct chunkd_slots *s;

	if (!chunkd_crc32c_hw() || slot_size < 512 || slots <= 0) {
		return 0;
	}
	s = calloc(1, sizeof(*s));
	if (s == 0) {
		return 0;
	}
	/* calloc'd: pages of the copy are only touched for the blocks read. */
	s->entries = calloc((size_t)slots, sizeof(uint64_t));
	s->loaded = calloc((size_t)((slots + ENTRY_BLOCK - 1) / ENTRY_BLOCK), 1);
	if (s->entries == 0 || s->loaded == 0) {
		free(s->entries);
		free(s->loaded);
		free(s);
		return 0;
	}
	/* Descriptors of its own: the owner of the files may close them first. */
	s->data_fd = fcntl(data_fd, F_DUPFD_CLOEXEC, 0);
	s->entries_fd = fcntl(entries_fd, F_DUPFD_CLOEXEC, 0);
	if (s->data_fd < 0 || s->entries_fd < 0) {
		s->data_fd >= 0 && close(s->data_fd);
		s->entries_fd >= 0 && close(s->entries_fd);
		free(s->entries);
		free(s->loaded);
		free(s);
		return 0;
	}
	s->slot_size = slot_size;
	s->slots = slots;
	s->filled = filled;
	s->reads = reads;
	s->pages_read = pages_read;
	s->lane = slot_size / 24 * 8;
	initShift(s);
	return s;
}

void chunkd_slots_gone(chunkd_slots *s) { __atomic_store_n(&s->gone, 1, __ATOMIC_RELEASE); }

void chunkd_slots_free(chunkd_slots *s) {
	close(s->data_fd);
	close(s->entries_fd);
	free(s->entries);
	free(s->loaded);
	free(s);
}

/* preadFull reads n bytes at off, or fewer at the end of the file. */
static ssize_t preadFull(int fd, unsigned char *buf, size_t n, int64_t off) {
	size_t got = 0;
	while (got < n) {
		ssize_t r = pread(fd, buf + got, n - got, (off_t)(off + (int64_t)got));
		if (r < 0 && errno == EINTR) {
			continue;
		}
		if (r <= 0) {
			return r < 0 ? r : (ssize_t)got;
		}
		got += (size_t)r;
	}
	return (ssize_t)got;
}

/* loadBlock reads the entries of block b into the copy. Threads that load
 * one block at once store the same values, or a later state of them. */
static void loadBlock(struct chunkd_slots *s, int64_t b) {
	uint64_t buf[ENTRY_BLOCK];
	int64_t first = b * ENTRY_BLOCK;
	int64_t n = s->slots - first < ENTRY_BLOCK ? s->slots - first : ENTRY_BLOCK;
	ssize_t got = preadFull(s->entries_fd, (unsigned char *)buf, (size_t)n * 8, first * 8);
	int64_t have = got > 0 ? got / 8 : 0; /* a file cut short: the rest reads as not filled */
	for (int64_t i = 0; i < n; i++) {
		uint64_t e = 0;
		if (i < have) {
			/* Entries are little-endian, as x86-64 is. */
			e = buf[i];
		}
		__atomic_store_n(&s->entries[first + i], e, __ATOMIC_RELAXED);
	}
	__atomic_store_n(&s->loaded[b], 1, __ATOMIC_RELEASE);
}

int chunkd_slots_read(chunkd_slots *s, void *buf, int n, int64_t off) {
	int64_t i, b;
	uint64_t e;

	if (n != s->slot_size || off < 0 || off % n != 0 || __atomic_load_n(&s->gone, __ATOMIC_ACQUIRE)) {
		return 0;
	}
	i = off / n;
	if (i >= s->slots) {
		return 0;
	}
	b = i / ENTRY_BLOCK;
	if (!__atomic_load_n(&s->loaded[b], __ATOMIC_ACQUIRE)) {
		loadBlock(s, b);
	}
	e = __atomic_load_n(&s->entries[i], __ATOMIC_RELAXED);
	if ((e & s->filled) == 0) {
		/* Filled since the copy was made? */
		loadBlock(s, b);
		e = __atomic_load_n(&s->entries[i], __ATOMIC_RELAXED);
		if ((e & s->filled) == 0) {
			return 0;
		}
	}
	/* The buffer is SQLite's; when the bytes fail their check, Go's read
	 * that follows overwrites them or fails the read, and SQLite uses no
	 * byte of a read that failed. */
	if (preadFull(s->data_fd, buf, (size_t)n, off) != n || slotCRC(s, buf) != (uint32_t)e) {
		return 0;
	}
	if (s->reads) {
		__atomic_fetch_add(s->reads, 1, __ATOMIC_RELAXED);
	}
	if (s->pages_read) {
		__atomic_fetch_add(s->pages_read, 1, __ATOMIC_RELAXED);
	}
	return 1;
}

uint32_t chunkd_slots_crc(chunkd_slots *s, const void *p) { return slotCRC(s, p); }
