//go:build chunkd_ext

/*
 * The loadable extension's entry point and its per-connection setup. The
 * host program's SQLite is reached only through the routines it hands the
 * entry point (sqlite3ext.h): nothing here links a SQLite of its own.
 */
#include <stdint.h>
#include <stdlib.h>
#include <sqlite3ext.h>

SQLITE_EXTENSION_INIT1

#include "_cgo_export.h"

/* From the VFS shim (package sqlitevfs). */
extern int chunkd_file_handle(sqlite3_file *f, uintptr_t *h);

/* The SQL functions, by the kind goFunc takes. */
enum { FN_VERSION, FN_ROOT, FN_STATS, FN_LAST_ERROR };

static void chunkdFunc(sqlite3_context *ctx, int kind) {
	char *err = 0;
	char *out = goFunc(kind, (uintptr_t)sqlite3_user_data(ctx), &err);
	if (err) {
		sqlite3_result_error(ctx, err, -1);
		free(err);
		return;
	}
	if (!out) {
		sqlite3_result_null(ctx);
		return;
	}
	sqlite3_result_text(ctx, out, -1, free);
}

static void fnVersion(sqlite3_context *ctx, int argc, sqlite3_value **argv) { chunkdFunc(ctx, FN_VERSION); }
static void fnRoot(sqlite3_context *ctx, int argc, sqlite3_value **argv) { chunkdFunc(ctx, FN_ROOT); }
static void fnStats(sqlite3_context *ctx, int argc, sqlite3_value **argv) { chunkdFunc(ctx, FN_STATS); }
static void fnLastError(sqlite3_context *ctx, int argc, sqlite3_value **argv) { chunkdFunc(ctx, FN_LAST_ERROR); }

/*
 * connInit runs for every connection the host opens from now on (an
 * automatic extension). On a connection whose main database is a file of
 * the chunkd VFS it reports the error the database failed to open with -
 * SQLite then fails the open with this code and "automatic extension
 * loading failed: <message>", which is how a VFS's own message reaches
 * sqlite3_errmsg - or registers the SQL functions (also when goConnCheck
 * lets a failed open through: chunkd_last_error() then says why).
 */
static int connInit(sqlite3 *db, char **pzErrMsg, const sqlite3_api_routines *pApi) {
	sqlite3_file *f = 0;
	uintptr_t h = 0;
	char *msg = 0;
	int rc;

	if (sqlite3_file_control(db, "main", SQLITE_FCNTL_FILE_POINTER, &f) != SQLITE_OK || !chunkd_file_handle(f, &h)) {
		return SQLITE_OK; /* not ours */
	}
	rc = goConnCheck(h, &msg);
	if (rc != SQLITE_OK) {
		*pzErrMsg = sqlite3_mprintf("%s", msg ? msg : "chunkd: the database did not open");
		free(msg);
		return rc;
	}
	const int flags = SQLITE_UTF8 | SQLITE_INNOCUOUS;
	rc = sqlite3_create_function_v2(db, "chunkd_version", 0, flags | SQLITE_DETERMINISTIC, (void *)h, fnVersion, 0, 0, 0);
	if (rc == SQLITE_OK) {
		rc = sqlite3_create_function_v2(db, "chunkd_root", 0, flags | SQLITE_DETERMINISTIC, (void *)h, fnRoot, 0, 0, 0);
	}
	if (rc == SQLITE_OK) {
		rc = sqlite3_create_function_v2(db, "chunkd_stats", 0, flags, (void *)h, fnStats, 0, 0, 0);
	}
	if (rc == SQLITE_OK) {
		rc = sqlite3_create_function_v2(db, "chunkd_last_error", 0, flags, (void *)h, fnLastError, 0, 0, 0);
	}
	return rc;
}

static int chunkdInit(sqlite3 *db, char **pzErrMsg, const sqlite3_api_routines *pApi) {
	char *err;
	int rc;

	SQLITE_EXTENSION_INIT2(pApi);
	/* sqlite3_uri_key, the newest routine used, came in 3.31. */
	if (sqlite3_libversion_number() < 3031000) {
		*pzErrMsg = sqlite3_mprintf("chunkd: needs SQLite 3.31 or later; this program's SQLite is %s", sqlite3_libversion());
		return SQLITE_ERROR;
	}
	err = goExtInit();
	if (err) {
		*pzErrMsg = sqlite3_mprintf("%s", err);
		free(err);
		return SQLITE_ERROR;
	}
	rc = sqlite3_auto_extension((void (*)(void))connInit);
	if (rc != SQLITE_OK) {
		return rc;
	}
	/* The Go runtime cannot be unloaded: keep the library loaded after
	 * this connection closes. */
	return SQLITE_OK_LOAD_PERMANENTLY;
}

/* The entry point SQLite derives from the file name chunkd.so (or
 * libchunkd.so), and the default one for any other name. */
int sqlite3_chunkd_init(sqlite3 *db, char **pzErrMsg, const sqlite3_api_routines *pApi) {
	return chunkdInit(db, pzErrMsg, pApi);
}

int sqlite3_extension_init(sqlite3 *db, char **pzErrMsg, const sqlite3_api_routines *pApi) {
	return chunkdInit(db, pzErrMsg, pApi);
}
