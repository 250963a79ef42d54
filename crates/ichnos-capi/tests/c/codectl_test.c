/*
 * The codectl C ABI from C: structure layouts, registration of this
 * program's own text with its SFrame section, look-ups, JIT tables written
 * and published from C, unregistration, the size-extension rules and every
 * error number.
 *
 * Built with -Wa,--gsframe so that the program has a PT_GNU_SFRAME segment.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <ichnos/codectl.h>

static int passed, failed;

#define CHECK(cond)                                                          \
	do {                                                                 \
		if (cond) {                                                  \
			passed++;                                            \
		} else {                                                     \
			failed++;                                            \
			printf("FAIL %s:%d: %s (last error: %s)\n", __FILE__, \
			       __LINE__, #cond, ichnos_last_error());        \
		}                                                            \
	} while (0)

/* The layouts of the proposal, checked at compile time. */
_Static_assert(sizeof(struct code_elf_info) == CODE_ELF_INFO_SIZE_VER0, "elf info size");
_Static_assert(offsetof(struct code_elf_info, elf_start) == 0, "elf_start");
_Static_assert(offsetof(struct code_elf_info, text_start) == 16, "text_start");
_Static_assert(offsetof(struct code_elf_info, sframe_start) == 32, "sframe_start");
_Static_assert(offsetof(struct code_elf_info, pathname) == 48, "pathname");
_Static_assert(offsetof(struct code_elf_info, build_id) == 56, "build_id");
_Static_assert(offsetof(struct code_elf_info, debug_link_pathname) == 64, "debug_link");
_Static_assert(offsetof(struct code_elf_info, build_id_len) == 72, "build_id_len");
_Static_assert(offsetof(struct code_elf_info, debug_link_crc) == 76, "debug_link_crc");
_Static_assert(sizeof(struct code_jit_info) == CODE_JIT_INFO_SIZE_VER1, "jit info size");
_Static_assert(offsetof(struct code_jit_info, name) == CODE_JIT_INFO_SIZE_VER0, "jit name");
_Static_assert(offsetof(struct code_jit_info, unwind_head) == 16, "unwind_head");
_Static_assert(offsetof(struct code_jit_unwind_fre, size) == 0, "fre size");
_Static_assert(offsetof(struct code_jit_unwind_fre, ip_off) == 4, "fre ip_off");
_Static_assert(offsetof(struct code_jit_unwind_fre, cfa_off) == 8, "fre cfa_off");
_Static_assert(offsetof(struct code_jit_unwind_fre, ra_off) == 12, "fre ra_off");
_Static_assert(offsetof(struct code_jit_unwind_fre, fp_off) == 16, "fre fp_off");
_Static_assert(offsetof(struct code_jit_unwind_fre, info) == 20, "fre info");
_Static_assert(sizeof(struct code_jit_unwind_fre) == 24, "fre stride");
_Static_assert(offsetof(struct code_jit_unwind_table, used_len) == 8, "used_len");
_Static_assert(offsetof(struct code_jit_unwind_table, next) == 16, "next");
_Static_assert(offsetof(struct code_jit_unwind_table, fre_stride) == 24, "fre_stride");
_Static_assert(offsetof(struct code_jit_unwind_table, fre_size) == 28, "fre_size");
_Static_assert(offsetof(struct code_jit_unwind_table, fre) == 32, "fre");
_Static_assert(sizeof(struct code_jit_unwind_table) == 32, "table header");

struct self_code {
	uint64_t elf_start, elf_end, text_start, text_end, sframe_start, sframe_end;
};

static int find_self(struct dl_phdr_info *info, size_t size, void *data)
{
	struct self_code *self = data;
	uint64_t lo = UINT64_MAX, hi = 0;
	(void)size;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *p = &info->dlpi_phdr[i];
		uint64_t start = info->dlpi_addr + p->p_vaddr;
		if (p->p_type == PT_LOAD) {
			if (p->p_vaddr < lo)
				lo = p->p_vaddr;
			if (p->p_vaddr + p->p_memsz > hi)
				hi = p->p_vaddr + p->p_memsz;
			if ((p->p_flags & PF_X) && !self->text_start) {
				self->text_start = start;
				self->text_end = start + p->p_memsz;
			}
		}
		if (p->p_type == 0x6474e554 /* PT_GNU_SFRAME */) {
			self->sframe_start = start;
			self->sframe_end = start + p->p_memsz;
		}
	}
	self->elf_start = info->dlpi_addr + (lo & ~(uint64_t)0xfff);
	self->elf_end = info->dlpi_addr + hi;
	return 1; /* the first object is the program itself */
}

__attribute__((noinline)) static long work(long x)
{
	volatile char buf[64];
	buf[x & 63] = (char)x;
	return buf[(x * 3) & 63] + x;
}

static void test_elf(void)
{
	struct self_code self = {0};
	dl_iterate_phdr(find_self, &self);
	CHECK(self.text_start != 0);
	CHECK(self.sframe_start != 0);

	static const unsigned char build_id[] = {0xde, 0xad, 0xbe, 0xef};
	struct code_elf_info elf = {
		.elf_start = self.elf_start,
		.elf_end = self.elf_end,
		.text_start = self.text_start,
		.text_end = self.text_end,
		.sframe_start = self.sframe_start,
		.sframe_end = self.sframe_end,
		.pathname = (uint64_t)(uintptr_t) "/proc/self/exe",
		.build_id = (uint64_t)(uintptr_t)build_id,
		.build_id_len = sizeof build_id,
	};
	CHECK(codectl(CODE_REGISTER_ELF, &elf, sizeof elf, 0) == 0);
	/* The same range again overlaps. */
	CHECK(codectl(CODE_REGISTER_ELF, &elf, sizeof elf, 0) == -EEXIST);
	CHECK(strlen(ichnos_last_error()) > 0);

	/* A look-up inside work() finds an SFrame row. */
	struct ichnos_code_lookup found;
	uint64_t pc = (uint64_t)(uintptr_t)work + 1;
	CHECK(ichnos_code_lookup(pc, &found) == 0);
	CHECK(found.text_start == self.text_start);
	CHECK(found.text_end == self.text_end);
	CHECK(found.source == ICHNOS_ROW_SFRAME);
	CHECK(found.has_row == 1);
	CHECK(found.row.info & CODE_JIT_FRE_CFA_BASE_SP);
	CHECK(self.text_start + found.row.ip_off <= pc);
	CHECK(pc < self.text_start + found.row.ip_off + found.row.size);
	CHECK(found.row.cfa_off >= 8);
	CHECK(work(3) != 0);

	CHECK(ichnos_code_lookup(pc, NULL) == -EINVAL);

	struct code_unregister_info un = {.text_start = self.text_start};
	CHECK(codectl(CODE_UNREGISTER, &un, sizeof un, 0) == 0);
	CHECK(ichnos_code_lookup(pc, &found) == -ENOENT);
	CHECK(codectl(CODE_UNREGISTER, &un, sizeof un, 0) == -ENOENT);
}

static void test_sizes_and_errors(void)
{
	/* Fake text ranges: the registry does not require them to be mapped. */
	struct code_elf_info elf = {
		.text_start = 0x10000000,
		.text_end = 0x10001000,
	};

	/* An older, shorter struct (through sframe_end) is zero-extended. */
	CHECK(codectl(CODE_REGISTER_ELF, &elf, offsetof(struct code_elf_info, pathname), 0) == 0);
	struct ichnos_code_lookup found;
	CHECK(ichnos_code_lookup(0x10000800, &found) == 0);
	CHECK(found.source == ICHNOS_ROW_NONE && found.has_row == 0);

	/* A newer, longer struct whose extra bytes are zero is accepted. */
	struct {
		struct code_elf_info info;
		uint64_t future[4];
	} bigger = {.info = {.text_start = 0x10001000, .text_end = 0x10002000}};
	CHECK(codectl(CODE_REGISTER_ELF, &bigger, sizeof bigger, 0) == 0);
	/* ... and refused when they are not. */
	bigger.info.text_start = 0x10002000;
	bigger.info.text_end = 0x10003000;
	bigger.future[2] = 1;
	CHECK(codectl(CODE_REGISTER_ELF, &bigger, sizeof bigger, 0) == -E2BIG);
	CHECK(strstr(ichnos_last_error(), "not 0") != NULL);
	CHECK(ichnos_code_lookup(0x10002800, &found) == -ENOENT);
	/* More than a page is refused whatever it holds. */
	static char page[8192];
	CHECK(codectl(CODE_REGISTER_ELF, page, sizeof page, 0) == -E2BIG);

	/* -EINVAL: flags, option, NULL info, empty range, text outside elf. */
	struct code_elf_info e = {.text_start = 0x20000000, .text_end = 0x20001000};
	CHECK(codectl(CODE_REGISTER_ELF, &e, sizeof e, 1) == -EINVAL);
	CHECK(codectl(7, &e, sizeof e, 0) == -EINVAL);
	CHECK(codectl(CODE_REGISTER_ELF, NULL, sizeof e, 0) == -EINVAL);
	e.text_end = e.text_start;
	CHECK(codectl(CODE_REGISTER_ELF, &e, sizeof e, 0) == -EINVAL);
	e.text_end = 0x20001000;
	e.elf_start = 0x20000800;
	e.elf_end = 0x20002000;
	CHECK(codectl(CODE_REGISTER_ELF, &e, sizeof e, 0) == -EINVAL);
	/* A zero-sized struct is all zeroes: an empty text range. */
	CHECK(codectl(CODE_REGISTER_ELF, &e, 0, 0) == -EINVAL);

	/* An SFrame range that is not readable memory: -EFAULT. */
	struct code_elf_info f = {
		.text_start = 0x30000000,
		.text_end = 0x30001000,
		.sframe_start = 0x1000,
		.sframe_end = 0x2000,
	};
	CHECK(codectl(CODE_REGISTER_ELF, &f, sizeof f, 0) == -EFAULT);
	/* Readable bytes that are not SFrame: -EINVAL. */
	static char junk[256] = "not an SFrame section";
	f.sframe_start = (uint64_t)(uintptr_t)junk;
	f.sframe_end = f.sframe_start + sizeof junk;
	CHECK(codectl(CODE_REGISTER_ELF, &f, sizeof f, 0) == -EINVAL);
	CHECK(strstr(ichnos_last_error(), "sfp_magic") != NULL);

	/* Overlap with a neighbour on either side. */
	struct code_elf_info o = {.text_start = 0x10000ff0, .text_end = 0x10001010};
	CHECK(codectl(CODE_REGISTER_ELF, &o, sizeof o, 0) == -EEXIST);

	struct code_unregister_info un = {.text_start = 0x10000000};
	CHECK(codectl(CODE_UNREGISTER, &un, sizeof un, 0) == 0);
	un.text_start = 0x10001000;
	CHECK(codectl(CODE_UNREGISTER, &un, sizeof un, 0) == 0);
	un.text_start = 0x10000000;
	CHECK(codectl(CODE_UNREGISTER, &un, sizeof un, 0) == -ENOENT);
}

/* A JIT table with room for 8 rows, written from C. */
#define JIT_ROWS 8
static _Alignas(8) unsigned char table_memory[sizeof(struct code_jit_unwind_table) +
					     JIT_ROWS * sizeof(struct code_jit_unwind_fre)];
static struct code_jit_unwind_table *const table = (struct code_jit_unwind_table *)table_memory;

static void append(uint32_t ip_off, uint32_t size, int32_t cfa_off)
{
	struct code_jit_unwind_fre *rows = (struct code_jit_unwind_fre *)table->fre;
	size_t n = table->used_len / sizeof(struct code_jit_unwind_fre);
	rows[n] = (struct code_jit_unwind_fre){
		.size = size,
		.ip_off = ip_off,
		.cfa_off = cfa_off,
		.info = CODE_JIT_FRE_CFA_BASE_SP,
	};
	__atomic_store_n(&table->used_len, (n + 1) * sizeof(struct code_jit_unwind_fre),
			 __ATOMIC_RELEASE);
}

static void test_jit(void)
{
	table->reserved_len = JIT_ROWS * sizeof(struct code_jit_unwind_fre);
	table->fre_stride = sizeof(struct code_jit_unwind_fre);
	table->fre_size = CODE_JIT_FRE_SIZE_VER0;
	append(0x00, 0x10, 8);
	append(0x10, 0x20, 24);

	struct code_jit_info jit = {
		.text_start = 0x40000000,
		.text_end = 0x40010000,
		.unwind_head = (uint64_t)(uintptr_t)table,
	};
	CHECK(codectl(CODE_REGISTER_JIT, &jit, sizeof jit, 0) == 0);
	struct ichnos_code_lookup found;
	CHECK(ichnos_code_lookup(0x40000018, &found) == 0);
	CHECK(found.source == ICHNOS_ROW_JIT);
	CHECK(found.has_row == 1);
	CHECK(found.row.ip_off == 0x10 && found.row.size == 0x20);
	CHECK(found.row.cfa_off == 24);

	/* Code emitted later: no row until it is published, then found. */
	CHECK(ichnos_code_lookup(0x40000100, &found) == 0);
	CHECK(found.has_row == 0);
	append(0x100, 0x40, 40);
	CHECK(ichnos_code_lookup(0x40000100, &found) == 0);
	CHECK(found.has_row == 1 && found.row.cfa_off == 40);

	/* A row below the last one (unsorted) is ignored, not trusted; the
	 * rows after it are still read. */
	append(0x50, 0x8, 99);
	append(0x200, 0x8, 56);
	CHECK(ichnos_code_lookup(0x40000200, &found) == 0);
	CHECK(found.has_row == 1 && found.row.cfa_off == 56);
	CHECK(ichnos_code_lookup(0x40000054, &found) == 0);
	CHECK(found.has_row == 0);

	/* JIT text may not overlap registered JIT text either. */
	struct code_jit_info clash = {.text_start = 0x4000f000, .text_end = 0x40020000};
	CHECK(codectl(CODE_REGISTER_JIT, &clash, sizeof clash, 0) == -EEXIST);

	struct code_unregister_info un = {.text_start = 0x40000000};
	CHECK(codectl(CODE_UNREGISTER, &un, sizeof un, 0) == 0);
	CHECK(ichnos_code_lookup(0x40000018, &found) == -ENOENT);
}

/* -ENOMEM: a child process whose address space is capped registers an
 * SFrame range too large to copy. */
static void test_nomem(void)
{
	static char sframe_bytes[64];
	pid_t pid = fork();
	if (pid == 0) {
		struct rlimit limit = {256u << 20, 256u << 20};
		FILE *status = fopen("/proc/self/status", "r");
		char line[256];
		unsigned long vm_kb = 0;
		while (status && fgets(line, sizeof line, status))
			if (sscanf(line, "VmSize: %lu kB", &vm_kb) == 1)
				break;
		if (status)
			fclose(status);
		limit.rlim_cur = limit.rlim_max = vm_kb * 1024 + (64u << 20);
		if (setrlimit(RLIMIT_AS, &limit) != 0)
			_exit(2);
		struct code_elf_info e = {
			.text_start = 0x50000000,
			.text_end = 0x50001000,
			.sframe_start = (uint64_t)(uintptr_t)sframe_bytes,
			.sframe_end = (uint64_t)(uintptr_t)sframe_bytes + (200u << 20),
		};
		_exit(codectl(CODE_REGISTER_ELF, &e, sizeof e, 0) == -ENOMEM ? 0 : 1);
	}
	int status = 0;
	CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* Reads /tmp/perf-PID.map into buf; its length, or -1. */
static long read_perf_map(char *buf, size_t size)
{
	char path[64];
	snprintf(path, sizeof path, "/tmp/perf-%d.map", (int)getpid());
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	size_t n = fread(buf, 1, size - 1, f);
	fclose(f);
	buf[n] = 0;
	return (long)n;
}

/* The registry's JIT code as a perf map: written whole, then kept. */
static void test_perf_map(void)
{
	struct code_jit_info named = {
		.text_start = 0x48000000,
		.text_end = 0x48000400,
		.name = (uint64_t)(uintptr_t)"jit_named_loop",
	};
	CHECK(codectl(CODE_REGISTER_JIT, &named, sizeof named, 0) == 0);
	CHECK(ichnos_registry_write_perf_map() == 0);
	char text[4096];
	CHECK(read_perf_map(text, sizeof text) > 0);
	CHECK(strstr(text, "48000000 400 jit_named_loop\n") != NULL);
	CHECK(ichnos_registry_keep_perf_map(1) == 0);
	struct code_jit_info later = {
		.text_start = 0x48001000,
		.text_end = 0x48001080,
		.name = (uint64_t)(uintptr_t)"jit_later",
	};
	CHECK(codectl(CODE_REGISTER_JIT, &later, sizeof later, 0) == 0);
	CHECK(read_perf_map(text, sizeof text) > 0);
	CHECK(strstr(text, "48001000 80 jit_later\n") != NULL);
	CHECK(ichnos_registry_keep_perf_map(0) == 0);
	char path[64];
	snprintf(path, sizeof path, "/tmp/perf-%d.map", (int)getpid());
	unlink(path);
	struct code_unregister_info un = {.text_start = 0x48000000};
	CHECK(codectl(CODE_UNREGISTER, &un, sizeof un, 0) == 0);
	un.text_start = 0x48001000;
	CHECK(codectl(CODE_UNREGISTER, &un, sizeof un, 0) == 0);
}

/* A FIFO as the pathname whose .eh_frame is converted: not read (never
 * waited on for a writer; the alarm ends a hang as a failure), and the
 * code is registered without rows, as for a file with no .eh_frame. */
static void test_fifo_pathname(void)
{
	struct self_code self = {0};
	dl_iterate_phdr(find_self, &self);
	char fifo[64];
	snprintf(fifo, sizeof fifo, "/tmp/ichnos-codectl-%d.fifo", (int)getpid());
	unlink(fifo);
	CHECK(mkfifo(fifo, 0600) == 0);
	struct code_elf_info elf = {
		.elf_start = self.elf_start,
		.elf_end = self.elf_end,
		.text_start = self.text_start,
		.text_end = self.text_end,
		.pathname = (uint64_t)(uintptr_t)fifo,
	};
	alarm(20);
	CHECK(codectl(CODE_REGISTER_ELF, &elf, sizeof elf, 0) == 0);
	struct ichnos_code_lookup found;
	CHECK(ichnos_code_lookup((uint64_t)(uintptr_t)work + 1, &found) == 0);
	alarm(0);
	CHECK(found.source == ICHNOS_ROW_NONE);
	CHECK(found.has_row == 0);
	struct code_unregister_info un = {.text_start = self.text_start};
	CHECK(codectl(CODE_UNREGISTER, &un, sizeof un, 0) == 0);
	unlink(fifo);
}

/* Bad pointers are -EFAULT, as the kernel's copy_from_user answers them,
 * never a crash; a string with no NUL within 4096 bytes is -ENAMETOOLONG. */
static void test_bad_pointers(void)
{
	struct self_code self = {0};
	dl_iterate_phdr(find_self, &self);
	long page = sysconf(_SC_PAGESIZE);
	char *two = mmap(NULL, 3 * page, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(two != MAP_FAILED);
	CHECK(munmap(two + 2 * page, page) == 0);

	CHECK(codectl(CODE_REGISTER_ELF, (void *)8, sizeof(struct code_elf_info), 0) == -EFAULT);
	CHECK(strstr(ichnos_last_error(), "cannot be read") != NULL);
	/* info_size runs into the unmapped page. */
	struct code_elf_info *end = (struct code_elf_info *)(two + 2 * page - 16);
	CHECK(codectl(CODE_REGISTER_ELF, end, sizeof(struct code_elf_info), 0) == -EFAULT);
	CHECK(codectl(CODE_UNREGISTER, two + 2 * page - 4, 8, 0) == -EFAULT);

	struct code_elf_info elf = {
		.elf_start = self.elf_start,
		.elf_end = self.elf_end,
		.text_start = self.text_start,
		.text_end = self.text_end,
		.sframe_start = self.sframe_start,
		.sframe_end = self.sframe_end,
	};
	struct code_elf_info bad = elf;
	bad.pathname = 8;
	CHECK(codectl(CODE_REGISTER_ELF, &bad, sizeof bad, 0) == -EFAULT);
	bad = elf;
	bad.debug_link_pathname = 8;
	CHECK(codectl(CODE_REGISTER_ELF, &bad, sizeof bad, 0) == -EFAULT);
	bad = elf;
	bad.build_id = 8;
	bad.build_id_len = 20;
	CHECK(codectl(CODE_REGISTER_ELF, &bad, sizeof bad, 0) == -EFAULT);
	/* A build id whose bytes run off the mapped memory. */
	bad.build_id = (uint64_t)(uintptr_t)(two + 2 * page - 4);
	CHECK(codectl(CODE_REGISTER_ELF, &bad, sizeof bad, 0) == -EFAULT);
	/* A pathname with no NUL before the unmapped page, and one with none
	 * within 4096 bytes of mapped memory. */
	memset(two, 'x', 2 * page);
	bad = elf;
	bad.pathname = (uint64_t)(uintptr_t)(two + 2 * page - 5);
	CHECK(codectl(CODE_REGISTER_ELF, &bad, sizeof bad, 0) == -EFAULT);
	bad.pathname = (uint64_t)(uintptr_t)two;
	CHECK(codectl(CODE_REGISTER_ELF, &bad, sizeof bad, 0) == -ENAMETOOLONG);
	/* A JIT name at address 8. */
	struct code_jit_info jit = {
		.text_start = (uint64_t)(uintptr_t)two,
		.text_end = (uint64_t)(uintptr_t)two + 64,
		.name = 8,
	};
	CHECK(codectl(CODE_REGISTER_JIT, &jit, sizeof jit, 0) == -EFAULT);
	/* An ELF range whose start is above its end. */
	struct code_elf_info reversed = elf;
	reversed.elf_start = self.elf_end;
	reversed.elf_end = self.elf_start;
	CHECK(codectl(CODE_REGISTER_ELF, &reversed, sizeof reversed, 0) == -EINVAL);
	CHECK(strstr(ichnos_last_error(), "is above its end") != NULL);
	/* Nothing of these was registered. */
	struct ichnos_code_lookup found;
	CHECK(ichnos_code_lookup((uint64_t)(uintptr_t)work + 1, &found) == -ENOENT);
	munmap(two, 2 * page);
}

int main(void)
{
	test_elf();
	test_sizes_and_errors();
	test_jit();
	test_nomem();
	test_perf_map();
	test_fifo_pathname();
	test_bad_pointers();
	printf("%d passed, %d failed\n", passed, failed);
	return failed != 0;
}
