/*
 * fabraid member superblock.
 *
 * A fabraid member (a drive of an erasure-coded fabraid volume) carries two
 * copies of its superblock, each 8 KiB, at 4 KiB and 12 KiB from the start
 * of the device. A copy starts with the magic "FABRAIDv" and ends with a
 * CRC32C of the rest of the copy; all integers are little-endian. The newer
 * valid copy (more events) describes the member.
 *
 * This file may be redistributed under the terms of the
 * GNU Lesser General Public License.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <stddef.h>

#include "superblocks.h"
#include "crc32c.h"

#define FABRAID_MAGIC		"FABRAIDv"
#define FABRAID_MAGIC_LEN	8
#define FABRAID_COPY_SIZE	8192
#define FABRAID_COPY_A		4096
#define FABRAID_COPY_B		12288
#define FABRAID_VERSION_MIN	1
#define FABRAID_VERSION_MAX	3
#define FABRAID_BLOCK_SIZE	4096

struct fabraid_super {
	uint8_t		magic[8];		/* "FABRAIDv" */
	uint32_t	version;		/* format version, 1..3 */
	uint32_t	flags;
	uint8_t		volume_uuid[16];
	uint8_t		name[64];		/* volume name, NUL padded */
	uint32_t	data_shards;		/* k */
	uint32_t	parity_shards;		/* m */
	uint32_t	groups;
	uint32_t	chunk_size;
	uint64_t	rows;
	uint32_t	block_size;		/* 4096 */
	uint32_t	codec;
	uint64_t	data_offset;
	uint64_t	bitmap_offset;
	uint32_t	bitmap_bytes;
	uint32_t	pad0;
	uint64_t	region_rows;
	uint64_t	events;
	uint64_t	epoch;
	uint32_t	state;			/* 1 clean, 2 dirty */
	uint32_t	slot;			/* this member's slot */
	uint8_t		member_uuid[16];
	/* ... member table; CRC32C of bytes 0..8187 at 8188 */
} __attribute__((packed));

/* A valid copy at off, or NULL (*rc: 1 none, -errno a read error). */
static const struct fabraid_super *fabraid_copy(blkid_probe pr, uint64_t off, int *rc)
{
	const unsigned char *buf;
	const struct fabraid_super *fs;
	uint32_t crc, stored;
	uint32_t version;

	*rc = 1;
	errno = 0;
	buf = blkid_probe_get_buffer(pr, off, FABRAID_COPY_SIZE);
	if (!buf) {
		if (errno)
			*rc = -errno;
		return NULL;
	}
	if (memcmp(buf, FABRAID_MAGIC, FABRAID_MAGIC_LEN) != 0)
		return NULL;
	fs = (const struct fabraid_super *) buf;
	version = le32_to_cpu(fs->version);
	if (version < FABRAID_VERSION_MIN || version > FABRAID_VERSION_MAX)
		return NULL;
	if (le32_to_cpu(fs->block_size) != FABRAID_BLOCK_SIZE)
		return NULL;
	memcpy(&stored, buf + FABRAID_COPY_SIZE - 4, sizeof(stored));
	crc = crc32c(~0U, buf, FABRAID_COPY_SIZE - 4) ^ ~0U;
	if (!blkid_probe_verify_csum(pr, crc, le32_to_cpu(stored)))
		return NULL;
	return fs;
}

static int probe_fabraid(blkid_probe pr,
		const struct blkid_idmag *mag __attribute__((__unused__)))
{
	const struct fabraid_super *a, *b, *fs;
	uint64_t off;
	int rca, rcb;

	a = fabraid_copy(pr, FABRAID_COPY_A, &rca);
	b = fabraid_copy(pr, FABRAID_COPY_B, &rcb);
	if (!a && !b)
		return rca < 0 ? rca : rcb;
	if (a && (!b || le64_to_cpu(a->events) >= le64_to_cpu(b->events))) {
		fs = a;
		off = FABRAID_COPY_A;
	} else {
		fs = b;
		off = FABRAID_COPY_B;
	}

	blkid_probe_sprintf_version(pr, "%u", le32_to_cpu(fs->version));
	if (blkid_probe_set_uuid(pr, fs->volume_uuid) != 0)
		return 1;
	if (blkid_probe_set_uuid_as(pr, fs->member_uuid, "UUID_SUB") != 0)
		return 1;
	if (fs->name[0] && blkid_probe_set_label(pr, fs->name, sizeof(fs->name)) != 0)
		return 1;
	if (blkid_probe_set_magic(pr, off, FABRAID_MAGIC_LEN, fs->magic) != 0)
		return 1;
	return 0;
}

const struct blkid_idinfo fabraid_idinfo = {
	.name		= "fabraid_member",
	.usage		= BLKID_USAGE_RAID,
	.probefunc	= probe_fabraid,
	.magics		= BLKID_NONE_MAGIC
};
