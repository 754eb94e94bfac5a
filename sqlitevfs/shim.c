/*
 * C side of the chunkd VFS. SQLite calls these functions; the ones that
 * touch database images call into Go (see cgo.go). Temporary files and
 * everything that does not depend on our files (randomness, time, sleeping,
 * dynamic loading) are delegated to the default VFS without leaving C.
 */
#include <stdlib.h>
#include <string.h>

#include "shim.h"
#include "_cgo_export.h"

/* An open file: the SQLite base struct, then a cgo.Handle for the Go file,
 * the answers to the per-file questions SQLite asks often, and the image's
 * slot file if it has one (read here, without calling into Go). */
typedef struct chunkdFile {
	sqlite3_file base;
	uintptr_t handle;
	int devchar;
	int sector;
	chunkd_slots *slots;
} chunkdFile;

static sqlite3_vfs *chunkd_default;

static int cdClose(sqlite3_file *f) {
	chunkdFile *p = (chunkdFile *)f;
	int rc = goClose(p->handle);
	p->handle = 0;
	p->slots = 0;
	return rc;
}

static int cdRead(sqlite3_file *f, void *buf, int n, sqlite3_int64 off) {
	chunkdFile *p = (chunkdFile *)f;
	if (p->slots && chunkd_slots_read(p->slots, buf, n, off)) {
		return CHUNKD_SQLITE_OK;
	}
	return goRead(p->handle, buf, n, off);
}

static int cdWrite(sqlite3_file *f, const void *buf, int n, sqlite3_int64 off) {
	return goWrite(((chunkdFile *)f)->handle, (void *)buf, n, off);
}

static int cdTruncate(sqlite3_file *f, sqlite3_int64 size) {
	return goTruncate(((chunkdFile *)f)->handle, size);
}

static int cdSync(sqlite3_file *f, int flags) {
	return CHUNKD_SQLITE_OK;
}

static int cdFileSize(sqlite3_file *f, sqlite3_int64 *size) {
	return goFileSize(((chunkdFile *)f)->handle, size);
}

/* Databases are immutable and temporary files private to one connection,
 * so there is nothing to lock. */
static int cdLock(sqlite3_file *f, int level) {
	return CHUNKD_SQLITE_OK;
}

static int cdUnlock(sqlite3_file *f, int level) {
	return CHUNKD_SQLITE_OK;
}

static int cdCheckReservedLock(sqlite3_file *f, int *out) {
	*out = 0;
	return CHUNKD_SQLITE_OK;
}

static int cdFileControl(sqlite3_file *f, int op, void *arg) {
	return CHUNKD_SQLITE_NOTFOUND;
}

static int cdSectorSize(sqlite3_file *f) {
	return ((chunkdFile *)f)->sector;
}

static int cdDeviceCharacteristics(sqlite3_file *f) {
	return ((chunkdFile *)f)->devchar;
}

static const sqlite3_io_methods chunkd_methods = {
	1, /* iVersion: no shared memory, no mmap (xFetch) */
	cdClose,
	cdRead,
	cdWrite,
	cdTruncate,
	cdSync,
	cdFileSize,
	cdLock,
	cdUnlock,
	cdCheckReservedLock,
	cdFileControl,
	cdSectorSize,
	cdDeviceCharacteristics,
};

/* Number of temporary files handed to the default VFS (for tests). */
static int64_t chunkd_temp_opens;

int64_t chunkd_temp_open_count(void) {
	return __atomic_load_n(&chunkd_temp_opens, __ATOMIC_RELAXED);
}

static int cdOpen(sqlite3_vfs *vfs, const char *name, sqlite3_file *f, int flags, int *outFlags) {
	chunkdFile *p = (chunkdFile *)f;
	uintptr_t handle = 0;
	int devchar = 0, sector = 0, out = flags;
	chunkd_slots *slots = 0;
	int rc;

	if ((flags & CHUNKD_SQLITE_OPEN_MAIN_DB) == 0) {
		f->pMethods = 0;
		if (flags & (CHUNKD_SQLITE_OPEN_MAIN_JOURNAL | CHUNKD_SQLITE_OPEN_SUPER_JOURNAL | CHUNKD_SQLITE_OPEN_WAL)) {
			/* Journals belong to writers; an immutable database has none. */
			return CHUNKD_SQLITE_CANTOPEN;
		}
		/* Temporary databases, sorter spills, statement journals: plain
		 * temporary files of the default VFS, which then serves them
		 * directly (the file gets its methods). szOsFile leaves room. */
		__atomic_fetch_add(&chunkd_temp_opens, 1, __ATOMIC_RELAXED);
		return chunkd_default->xOpen(chunkd_default, name, f, flags, outFlags);
	}

	memset(p, 0, sizeof(*p));
	rc = goOpen((char *)name, flags, &out, &handle, &devchar, &sector, &slots);
	if (rc != CHUNKD_SQLITE_OK) {
		/* With pMethods left NULL, SQLite does not call xClose. */
		return rc;
	}
	p->handle = handle;
	p->devchar = devchar;
	p->sector = sector;
	p->slots = slots;
	p->base.pMethods = &chunkd_methods;
	if (outFlags) {
		*outFlags = out;
	}
	return CHUNKD_SQLITE_OK;
}

static int cdDelete(sqlite3_vfs *vfs, const char *name, int syncDir) {
	/* Nothing here can be deleted: databases are read-only and temporary
	 * files vanish on close. SQLite treats NOENT as success. */
	return CHUNKD_SQLITE_IOERR_DELETE_NOENT;
}

static int cdAccess(sqlite3_vfs *vfs, const char *name, int flags, int *out) {
	*out = goAccess((char *)name, flags);
	return CHUNKD_SQLITE_OK;
}

static int cdFullPathname(sqlite3_vfs *vfs, const char *name, int nOut, char *out) {
	/* Names are registry keys, not paths: use them as they are. */
	size_t n = strlen(name);
	if (n + 1 > (size_t)nOut) {
		return CHUNKD_SQLITE_CANTOPEN;
	}
	memcpy(out, name, n + 1);
	return CHUNKD_SQLITE_OK;
}

static void *cdDlOpen(sqlite3_vfs *vfs, const char *path) {
	return chunkd_default->xDlOpen(chunkd_default, path);
}

static void cdDlError(sqlite3_vfs *vfs, int n, char *msg) {
	chunkd_default->xDlError(chunkd_default, n, msg);
}

static void (*cdDlSym(sqlite3_vfs *vfs, void *h, const char *sym))(void) {
	return chunkd_default->xDlSym(chunkd_default, h, sym);
}

static void cdDlClose(sqlite3_vfs *vfs, void *h) {
	chunkd_default->xDlClose(chunkd_default, h);
}

static int cdRandomness(sqlite3_vfs *vfs, int n, char *out) {
	return chunkd_default->xRandomness(chunkd_default, n, out);
}

static int cdSleep(sqlite3_vfs *vfs, int us) {
	return chunkd_default->xSleep(chunkd_default, us);
}

static int cdCurrentTime(sqlite3_vfs *vfs, double *t) {
	return chunkd_default->xCurrentTime(chunkd_default, t);
}

static int cdGetLastError(sqlite3_vfs *vfs, int n, char *msg) {
	return chunkd_default->xGetLastError ? chunkd_default->xGetLastError(chunkd_default, n, msg) : 0;
}

static int cdCurrentTimeInt64(sqlite3_vfs *vfs, sqlite3_int64 *t) {
	if (chunkd_default->iVersion >= 2 && chunkd_default->xCurrentTimeInt64) {
		return chunkd_default->xCurrentTimeInt64(chunkd_default, t);
	}
	double d;
	int rc = chunkd_default->xCurrentTime(chunkd_default, &d);
	*t = (sqlite3_int64)(d * 86400000.0);
	return rc;
}

const char *chunkd_uri_key(const char *name, int n) {
	return sqlite3_uri_key(name, n);
}

const char *chunkd_uri_value(const char *name, int n) {
	const char *key = sqlite3_uri_key(name, n);
	return key ? sqlite3_uri_parameter(name, key) : 0;
}

int chunkd_file_handle(sqlite3_file *f, uintptr_t *h) {
	if (f == 0 || f->pMethods != &chunkd_methods) {
		return 0;
	}
	*h = ((chunkdFile *)f)->handle;
	return 1;
}

int chunkd_register(const char *name, int maxPathname) {
	sqlite3_vfs *vfs;

	chunkd_default = sqlite3_vfs_find(0);
	if (chunkd_default == 0) {
		return CHUNKD_SQLITE_ERROR;
	}
	vfs = calloc(1, sizeof(*vfs));
	if (vfs == 0) {
		return CHUNKD_SQLITE_ERROR;
	}
	vfs->iVersion = 2;
	vfs->szOsFile = sizeof(chunkdFile);
	if (chunkd_default->szOsFile > vfs->szOsFile) {
		vfs->szOsFile = chunkd_default->szOsFile;
	}
	vfs->mxPathname = maxPathname;
	vfs->zName = strdup(name);
	vfs->xOpen = cdOpen;
	vfs->xDelete = cdDelete;
	vfs->xAccess = cdAccess;
	vfs->xFullPathname = cdFullPathname;
	vfs->xDlOpen = cdDlOpen;
	vfs->xDlError = cdDlError;
	vfs->xDlSym = cdDlSym;
	vfs->xDlClose = cdDlClose;
	vfs->xRandomness = cdRandomness;
	vfs->xSleep = cdSleep;
	vfs->xCurrentTime = cdCurrentTime;
	vfs->xGetLastError = cdGetLastError;
	vfs->xCurrentTimeInt64 = cdCurrentTimeInt64;
	return sqlite3_vfs_register(vfs, 0);
}
