/*
 * tar.h — tar archives as WebDataset shards: the header parser, a push
 * scanner over an archive's bytes, member names split into key and
 * extension, the shard index file ("sidecar") reader and writer, and the
 * ustar header writer that `nostall pack` uses.
 * Room: dataset/ (what the items are).
 *
 * Archives. POSIX ustar (the 155-byte prefix joined to the name), GNU
 * (type 'L' long names, 'K' long link names skipped, base-256 sizes) and
 * pax ('x': the `path` and `size` records of the next member; 'g' skipped)
 * headers. A header's checksum is checked (the unsigned sum, or the signed
 * sum old archivers wrote). Regular members ('0', '\0', '7') are members;
 * directories, links, devices and FIFOs carry no data (their size field is
 * ignored, as Python's tarfile does); other types are skipped with their
 * data. An all-zero block ends the archive. Data is padded to 512 bytes.
 * GNU sparse members (type 'S' with its extension blocks, or a member whose
 * pax header has GNU.sparse.* records: formats 0.0, 0.1 and 1.0) are not
 * expanded: each is a SPARSE damage event naming it (GNU.sparse.name when
 * given), its stored data skipped, so it is reported, never delivered as
 * its stored chunks.
 *
 * Damage is an event, never a stop: a header whose checksum or fields are
 * wrong starts a damaged region that ends at the next valid ustar header
 * (blocks are tested one by one: a valid checksum and the "ustar" magic),
 * so the rest of the shard is still used; a long name or pax header that
 * is malformed or over NST_TAR_EXT_MAX bytes damages the member it
 * describes; an archive that ends inside an entry (a truncated file, a
 * transfer cut short) damages that entry. Each is reported once as a
 * DAMAGE event with the region's bytes and a code (nst_tar_damage_name).
 *
 * The scanner is a push parser (no I/O of its own): the caller feeds the
 * archive's bytes in order, in pieces of any size, and gets events —
 * MEMBER (a regular member's name, data offset and size), DATA (pieces of
 * that member's data, pointing into what was fed: no copy), DAMAGE and
 * END. After a MEMBER event a caller with random access (a header pass
 * over a local file or ranged HTTP reads) may call nst_tar_skip() and
 * continue feeding at the next header (s->pos); a streaming caller feeds
 * everything and takes the DATA events.
 *
 * Names. WebDataset groups consecutive members into samples by key: the
 * name up to the first dot of its last path component ("a/b.c.jpg": key
 * "a/b", extension "c.jpg"); a member whose last component has no dot or
 * starts with one is not part of any sample (webdataset's own rule).
 *
 * The shard index file ("NAME.tar.nstidx" beside NAME.tar; version 2;
 * integers little-endian):
 *      0   8  magic 89 4E 53 54 49 44 58 0A ("\x89NSTIDX\n")
 *      8   4  version (2; version 1 files, without the identity below,
 *             are refused: the loader indexes the shard again)
 *     12   4  flags: bit 0 = written by a header pass (not by pack)
 *     16   8  tar_bytes: the size of the shard described (a shard of
 *             another size is not described by this file)
 *     24   8  samples: sample records in the body
 *     32   8  members: member entries of those samples, in all
 *     40   8  body_bytes
 *     48   8  fingerprint: nst_tar_index_fingerprint() of the shard described
 *             (its size and its first and last NST_TAR_INDEX_FP_BYTES bytes)
 *     56   8  mtime: a local shard's modification time in ns (0: none)
 *     64   8  validator: a hash of a URL's ETag (else Last-Modified) as the
 *             server sent it with the shard (0: none)
 *     72      the body: records in archive order
 *     72 + body_bytes   8  checksum: nostall_checksum_update() of bytes
 *             [0, 72 + body_bytes) folded in one call into a state of 0
 *   The identity (48..72) binds the file to one version of the shard: a
 *   shard rebuilt in place with the same size (its samples re-shuffled)
 *   has another fingerprint or mtime, and its old index is not used
 *   (shards.h says which fields each source checks).
 *   A record starts with a varint key length k.
 *     k > 0, a sample: k key bytes (no NUL), a varint m (1..64) and m
 *       members, each: a varint e (0..255) and e extension bytes (no NUL,
 *       no '/'), a varint gap, a varint size; and, when the extension is
 *       "cls" (any case), a varint label: 0 when the member's text is not
 *       an integer in (-2^62, 2^62), else zigzag(label) + 1. The member's
 *       data is bytes [cursor + gap, cursor + gap + size) of the shard; gap
 *       is at least 512 (its header); then cursor = the data's end.
 *     k = 0, a damaged region: a varint gap, a varint length, a varint
 *       code (NST_TAR_DMG_*), a varint n (0..NST_TAR_INDEX_MAX_DNAME) and n
 *       bytes (no NUL) naming the member involved (its first bytes when
 *       longer; n = 0: none): bytes [cursor + gap, cursor + gap + length);
 *       then cursor = the region's end (a header pass records what it
 *       found, so an index read from the cache reports it again).
 *   The cursor starts at 0; every region ends within tar_bytes. Varints
 *   are unsigned LEB128 of at most 10 bytes.
 *
 * Self-contained (standard headers only), so that tools/pack.c can share
 * the writer. Nothing here allocates except the index writer's buffer.
 * Not thread-safe per object; distinct objects on distinct threads.
 */
#ifndef NST_DATASET_TAR_H
#define NST_DATASET_TAR_H

#include <stddef.h>
#include <stdint.h>

#define NST_TAR_BLOCK 512
/* Longest GNU long name or pax header taken (bytes). */
#define NST_TAR_EXT_MAX 16384
/* Members of one sample that an index keeps. */
#define NST_TAR_INDEX_MAX_MEMBERS 64
#define NST_TAR_INDEX_MAX_KEY 4096
#define NST_TAR_INDEX_MAX_EXT 255
#define NST_TAR_INDEX_HEADER 72
#define NST_TAR_INDEX_VERSION 2
/* Bytes of a damaged region's member name an index keeps. */
#define NST_TAR_INDEX_MAX_DNAME 1024
/* Bytes at each end of a shard that its fingerprint hashes. */
#define NST_TAR_INDEX_FP_BYTES 65536
#define NST_TAR_INDEX_SUFFIX ".nstidx"

/* Damage codes. */
enum {
    NST_TAR_DMG_HEADER = 1,    /* a header's checksum or fields are wrong    */
    NST_TAR_DMG_TRUNCATED = 2, /* the archive ends inside this entry         */
    NST_TAR_DMG_EXTENDED = 3,  /* a long name / pax header malformed or over
                                  NST_TAR_EXT_MAX: the member it names lost */
    NST_TAR_DMG_DUPLICATE = 4, /* a sample holds two members of one key and
                                  extension (webdataset raises): all lost    */
    NST_TAR_DMG_MEMBERS = 5,   /* a sample of more than NST_TAR_INDEX_MAX_MEMBERS
                                  members: all lost                         */
    NST_TAR_DMG_SPARSE = 6,    /* a GNU sparse member (not expanded)       */
    NST_TAR_DMG_LONGNAME = 7,  /* a key over NST_TAR_INDEX_MAX_KEY bytes or an
                                  extension over NST_TAR_INDEX_MAX_EXT           */
    NST_TAR_DMG_MAX = 7
};
const char *nst_tar_damage_name(int code);

/* ---- one header ------------------------------------------------------ */

enum {
    NST_TAR_T_FILE = 1,     /* a regular member: data follows            */
    NST_TAR_T_LONGNAME = 2, /* 'L': the next member's name               */
    NST_TAR_T_PAX = 3,      /* 'x': the next member's pax records        */
    NST_TAR_T_SKIP = 4,     /* 'K', 'g', unknown types: data skipped     */
    NST_TAR_T_NODATA = 5,   /* directories, links, devices, FIFOs        */
    NST_TAR_T_SPARSE = 6    /* 'S': old GNU sparse (extension blocks may
                               follow: byte 482 set)                      */
};

typedef struct nst_tar_hdr {
    char name[257]; /* prefix "/" name (ustar), NUL-terminated            */
    uint64_t size;  /* the size field (0 for NODATA types)               */
    int type;       /* NST_TAR_T_*                                       */
    char typeflag;
    int sparse_ext; /* 'S': extension blocks follow the header           */
} nst_tar_hdr;

/* Parse one 512-byte block: 0 a header, 1 an all-zero block (the end of
 * the archive), -1 not a valid header (checksum, size field). With
 * `strict`, a header also needs the "ustar" magic (resynchronizing). */
int nst_tar_header(const uint8_t blk[NST_TAR_BLOCK], int strict, nst_tar_hdr *h);

/* ---- the push scanner -------------------------------------------------- */

enum { NST_TAR_EV_MEMBER = 1, NST_TAR_EV_DATA = 2, NST_TAR_EV_DAMAGE = 3, NST_TAR_EV_END = 4 };

typedef struct nst_tar_ev {
    int kind;
    const char *name;      /* MEMBER; DAMAGE: the entry's name, or ""
                               (valid until the next header is parsed)   */
    uint64_t offset, size; /* MEMBER: its data; DAMAGE: the region     */
    const uint8_t *data;   /* DATA: a piece of the member's data, in    */
    size_t len;            /* what was fed, at archive offset `offset`  */
    int code;              /* DAMAGE: NST_TAR_DMG_*                     */
} nst_tar_ev;

typedef struct nst_tar_scan {
    uint64_t pos; /* archive offset of the next byte to feed   */
    /* private */
    int state, mode, ekind;
    uint32_t have;      /* bytes of blk collected                    */
    uint64_t left, pad; /* entry data left, padding left             */
    uint64_t entry;     /* the current entry's header offset         */
    uint64_t data_off, data_size;
    uint64_t bad_at;    /* resync: where the damaged region began    */
    uint64_t poison_at; /* a bad extended header damages the next member */
    int poison, ext_type, has_xsize, has_xname;
    int sparse, sparse_named; /* the pax header has GNU.sparse.* records */
    uint64_t xsize;
    size_t ext_len, name_len;
    uint8_t blk[NST_TAR_BLOCK];
    char name[NST_TAR_EXT_MAX];
    uint8_t ext[NST_TAR_EXT_MAX];
} nst_tar_scan;

void nst_tar_scan_init(nst_tar_scan *s);
/* Feed n bytes (the archive's bytes at s->pos). Returns 1 with *ev set
 * after consuming *used bytes (< n possible), or 0 with all n consumed and
 * no event. After END, everything fed is consumed without events. */
int nst_tar_feed(nst_tar_scan *s, const uint8_t *p, size_t n, size_t *used, nst_tar_ev *ev);
/* Right after a MEMBER event: do not deliver its data; s->pos becomes the
 * next header's offset (which may lie past the archive's end). */
void nst_tar_skip(nst_tar_scan *s);
/* The input ended at archive offset `end` (the file's size; where a cut
 * transfer stopped). Returns 1 with a DAMAGE event if that is inside an
 * entry or a damaged region (the entry named), else 0. Call once. */
int nst_tar_finish(nst_tar_scan *s, uint64_t end, nst_tar_ev *ev);

/* ---- names ------------------------------------------------------------- */

/* Split a member name (len bytes) into key and extension by webdataset's
 * rule. 1 with *key_len and *ext (pointing into name) / *ext_len, or 0 when
 * the member belongs to no sample. */
int nst_tar_split_name(const char *name, size_t len, size_t *key_len, const char **ext,
                       size_t *ext_len);
/* Extension classes (case-insensitive). */
enum { NST_EXT_OTHER = 0, NST_EXT_IMAGE = 1, NST_EXT_CLS = 2, NST_EXT_JSON = 3, NST_EXT_TXT = 4 };
int nst_tar_ext_class(const char *ext, size_t len);
/* A .cls member's text as a label: an optional '-', decimal digits, in
 * (-2^62, 2^62), surrounded by optional whitespace. 1 with *label, else 0. */
int nst_tar_parse_label(const uint8_t *text, size_t len, int64_t *label);

/* ---- the shard index file ---------------------------------------------- */

typedef struct nst_tar_index_member {
    const char *ext; /* into the file's bytes, not NUL-terminated */
    uint32_t ext_len;
    int has_label; /* a .cls member whose text is a label        */
    int64_t label;
    uint64_t offset, size;
} nst_tar_index_member;

typedef struct nst_tar_index_rec {
    const char *key; /* NULL: a damaged region (offset, size, code) */
    uint32_t key_len, nmembers;
    uint64_t offset, size;
    int code;
    const char *dname;  /* a damaged region: the member involved (dname_len */
    uint32_t dname_len; /* bytes, not NUL-terminated; 0: none)             */
    nst_tar_index_member m[NST_TAR_INDEX_MAX_MEMBERS];
} nst_tar_index_rec;

/* What binds an index file to one version of its shard (see the format). */
typedef struct nst_tar_index_ident {
    uint64_t fingerprint, mtime, validator;
} nst_tar_index_ident;

/* The fingerprint of a shard of `size` bytes: head holds its first
 * min(size, NST_TAR_INDEX_FP_BYTES) bytes, tail its last as many. Never 0. */
uint64_t nst_tar_index_fingerprint(uint64_t size, const uint8_t *head, size_t head_len,
                                   const uint8_t *tail, size_t tail_len);

typedef struct nst_tar_index_reader {
    uint64_t tar_bytes, samples, members;
    uint32_t version, flags;
    nst_tar_index_ident ident;
    /* private */
    const uint8_t *p, *end;
    uint64_t cursor, left, members_left;
} nst_tar_index_reader;

/* Check an index file in memory (magic, version, sizes, checksum). 0, or
 * -1 with a reason in why[n] ("bad magic", "checksum mismatch", ...). */
int nst_tar_index_open(nst_tar_index_reader *r, const uint8_t *data, size_t len, char *why,
                       size_t n);
/* The same without the checksum, for a file already checked. */
int nst_tar_index_open_checked(nst_tar_index_reader *r, const uint8_t *data, size_t len, char *why,
                               size_t n);
/* The next record: 1 (rec filled; its pointers into the data), 0 at the
 * end (every record read and accounted for), -1 malformed (why set). */
int nst_tar_index_next(nst_tar_index_reader *r, nst_tar_index_rec *rec, char *why, size_t n);

/* The writer: records appended in archive order, then finished into one
 * buffer holding the whole file. */
typedef struct nst_tar_index_writer {
    uint8_t *buf;
    size_t len, cap;
    uint64_t samples, members, cursor;
    uint32_t flags;
    int failed;                /* out of memory or out of order: finish fails */
    nst_tar_index_ident ident; /* set before finish (nst_shard_ident_file)    */
} nst_tar_index_writer;

void nst_tar_index_writer_init(nst_tar_index_writer *w, uint32_t flags);
void nst_tar_index_writer_free(nst_tar_index_writer *w);
/* Append a sample (key, members with their offsets; labels of .cls
 * members in has_label/label) or a damaged region (dname/dname_len: the
 * member involved, cut to NST_TAR_INDEX_MAX_DNAME bytes). -1 when the record is
 * invalid (out of order, over the limits) or memory ran out. */
int nst_tar_index_add(nst_tar_index_writer *w, const nst_tar_index_rec *rec);
/* The whole file in w->buf[0 .. *len): header and checksum written. */
int nst_tar_index_finish(nst_tar_index_writer *w, uint64_t tar_bytes, size_t *len);

/* ---- writing shards ------------------------------------------------------ */

/* A ustar header for a regular member of `size` bytes: the name split into
 * prefix and name where it is longer than 100 bytes. -1 when the name does
 * not fit ustar (then write a pax header first: nst_tar_pax_path). Owner
 * 0/0, mode 0444, uname/gname empty: the archive's bytes depend only on
 * names, sizes, mtime and data. */
int nst_tar_write_header(uint8_t blk[NST_TAR_BLOCK], const char *name, uint64_t size,
                         uint64_t mtime);
/* A pax 'x' entry naming the next member `name`: its header and padded
 * data into out (room for out_cap bytes); returns the bytes written (a
 * multiple of 512), or 0 when it does not fit. */
size_t nst_tar_pax_path(uint8_t *out, size_t out_cap, const char *name, uint64_t mtime);

#endif
