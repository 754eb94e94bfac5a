/*
 * The part of SQLite's C interface the chunkd VFS shim needs, declared here
 * from the documented, stable ABI (https://sqlite.org/c3ref/vfs.html and
 * https://sqlite.org/c3ref/io_methods.html) so the package does not depend
 * on where a driver keeps its copy of sqlite3.h. The functions themselves
 * come from the SQLite library linked into the program by
 * github.com/mattn/go-sqlite3.
 */
#ifndef CHUNKD_SQLITEVFS_SHIM_H
#define CHUNKD_SQLITEVFS_SHIM_H

#include <stdint.h>

#ifdef CHUNKD_SQLITE_EXT
/* Built into a loadable extension (the chunkd_ext build tag): the host
 * program's SQLite is reached through the routines it hands the
 * extension, by the macros of sqlite3ext.h, and declares the types. */
#include <sqlite3ext.h>
SQLITE_EXTENSION_INIT3
#else

typedef long long sqlite3_int64;

typedef struct sqlite3_file sqlite3_file;
typedef struct sqlite3_io_methods sqlite3_io_methods;
typedef struct sqlite3_vfs sqlite3_vfs;

struct sqlite3_file {
	const sqlite3_io_methods *pMethods;
};

/* Version 1 of sqlite3_io_methods: no shared memory, no memory mapping. */
struct sqlite3_io_methods {
	int iVersion;
	int (*xClose)(sqlite3_file *);
	int (*xRead)(sqlite3_file *, void *, int iAmt, sqlite3_int64 iOfst);
	int (*xWrite)(sqlite3_file *, const void *, int iAmt, sqlite3_int64 iOfst);
	int (*xTruncate)(sqlite3_file *, sqlite3_int64 size);
	int (*xSync)(sqlite3_file *, int flags);
	int (*xFileSize)(sqlite3_file *, sqlite3_int64 *pSize);
	int (*xLock)(sqlite3_file *, int);
	int (*xUnlock)(sqlite3_file *, int);
	int (*xCheckReservedLock)(sqlite3_file *, int *pResOut);
	int (*xFileControl)(sqlite3_file *, int op, void *pArg);
	int (*xSectorSize)(sqlite3_file *);
	int (*xDeviceCharacteristics)(sqlite3_file *);
};

/* Version 2 of sqlite3_vfs (adds xCurrentTimeInt64). */
struct sqlite3_vfs {
	int iVersion;
	int szOsFile;
	int mxPathname;
	sqlite3_vfs *pNext;
	const char *zName;
	void *pAppData;
	int (*xOpen)(sqlite3_vfs *, const char *zName, sqlite3_file *, int flags, int *pOutFlags);
	int (*xDelete)(sqlite3_vfs *, const char *zName, int syncDir);
	int (*xAccess)(sqlite3_vfs *, const char *zName, int flags, int *pResOut);
	int (*xFullPathname)(sqlite3_vfs *, const char *zName, int nOut, char *zOut);
	void *(*xDlOpen)(sqlite3_vfs *, const char *zFilename);
	void (*xDlError)(sqlite3_vfs *, int nByte, char *zErrMsg);
	void (*(*xDlSym)(sqlite3_vfs *, void *, const char *zSymbol))(void);
	void (*xDlClose)(sqlite3_vfs *, void *);
	int (*xRandomness)(sqlite3_vfs *, int nByte, char *zOut);
	int (*xSleep)(sqlite3_vfs *, int microseconds);
	int (*xCurrentTime)(sqlite3_vfs *, double *);
	int (*xGetLastError)(sqlite3_vfs *, int, char *);
	int (*xCurrentTimeInt64)(sqlite3_vfs *, sqlite3_int64 *);
};

sqlite3_vfs *sqlite3_vfs_find(const char *zVfsName);
int sqlite3_vfs_register(sqlite3_vfs *, int makeDflt);
const char *sqlite3_uri_key(const char *zFilename, int N);
const char *sqlite3_uri_parameter(const char *zFilename, const char *zParam);

#endif /* CHUNKD_SQLITE_EXT */

/* Result codes used by the shim. */
#define CHUNKD_SQLITE_OK 0
#define CHUNKD_SQLITE_ERROR 1
#define CHUNKD_SQLITE_NOTFOUND 12
#define CHUNKD_SQLITE_CANTOPEN 14
#define CHUNKD_SQLITE_IOERR_DELETE_NOENT (10 | (23 << 8))

/* Open flags used by the shim. */
#define CHUNKD_SQLITE_OPEN_MAIN_DB 0x00000100
#define CHUNKD_SQLITE_OPEN_MAIN_JOURNAL 0x00000800
#define CHUNKD_SQLITE_OPEN_SUPER_JOURNAL 0x00004000
#define CHUNKD_SQLITE_OPEN_WAL 0x00080000

/* chunkd_register registers the VFS under name; it returns an SQLite
 * result code. */
int chunkd_register(const char *name, int maxPathname);

/* chunkd_temp_open_count returns how many temporary files the VFS has
 * opened through the default VFS. */
int64_t chunkd_temp_open_count(void);

/* chunkd_uri_key and chunkd_uri_value return the name and the value of
 * URI parameter n of the database file name SQLite passed to xOpen, or
 * NULL past the last one. */
const char *chunkd_uri_key(const char *name, int n);
const char *chunkd_uri_value(const char *name, int n);

/* chunkd_file_handle reports whether f is a database file of this VFS,
 * and if so sets *h to its handle (see sqlitevfs.ValueOf). */
int chunkd_file_handle(sqlite3_file *f, uintptr_t *h);


/* A SlotFile the VFS reads without calling into Go (slots.c, slots.go). */
typedef struct chunkd_slots chunkd_slots;

/* chunkd_crc32c_hw reports whether the CPU has the CRC-32C instruction
 * (SSE4.2); without it there is no chunkd_slots. */
int chunkd_crc32c_hw(void);

/* chunkd_slots_new returns the reader of slots slots of slot_size bytes
 * in data_fd, with 8-byte entries in entries_fd (see SlotFile), counting
 * the pages it reads in *reads and *pages_read (either may be NULL); it
 * reads duplicates of the descriptors, which chunkd_slots_free closes.
 * NULL when the CPU lacks the CRC instruction, or descriptors or memory
 * are short. */
chunkd_slots *chunkd_slots_new(int data_fd, int entries_fd, int slot_size, int64_t slots, uint64_t filled, int64_t *reads, int64_t *pages_read);

/* chunkd_slots_read reads the page at off (n bytes, a whole slot) into
 * buf and reports whether it did: its slot filled, and its bytes matching
 * their CRC-32C. 0 leaves the read to Go. */
int chunkd_slots_read(chunkd_slots *s, void *buf, int n, int64_t off);

/* chunkd_slots_gone makes every later read of s return 0. */
void chunkd_slots_gone(chunkd_slots *s);

/* chunkd_slots_free closes s's descriptors and frees it. */
void chunkd_slots_free(chunkd_slots *s);

/* chunkd_slots_crc returns the CRC-32C of one slot's bytes at p, as
 * chunkd_slots_read computes it (for tests). */
uint32_t chunkd_slots_crc(chunkd_slots *s, const void *p);

#endif
