/*
 * A process that registers code through codectl() and waits: the parent
 * test reads its registry from outside, through the exported
 * ichnos_code_registry symbol and process_vm_readv.
 */
#define _GNU_SOURCE
#include <link.h>
#include <stdio.h>
#include <string.h>

#include <ichnos/codectl.h>

static _Alignas(8) unsigned char table_memory[sizeof(struct code_jit_unwind_table) +
					     4 * sizeof(struct code_jit_unwind_fre)];

int main(void)
{
	int n = ichnos_code_register_loaded_objects();

	struct code_jit_unwind_table *table = (struct code_jit_unwind_table *)table_memory;
	struct code_jit_unwind_fre *rows = (struct code_jit_unwind_fre *)table->fre;
	table->reserved_len = 4 * sizeof *rows;
	table->fre_stride = sizeof *rows;
	table->fre_size = CODE_JIT_FRE_SIZE_VER0;
	rows[0] = (struct code_jit_unwind_fre){
		.size = 0x40, .ip_off = 0x80, .cfa_off = 32, .fp_off = -16,
		.info = CODE_JIT_FRE_CFA_BASE_SP,
	};
	__atomic_store_n(&table->used_len, sizeof *rows, __ATOMIC_RELEASE);
	struct code_jit_info jit = {
		.text_start = 0x60000000,
		.text_end = 0x60001000,
		.unwind_head = (uint64_t)(uintptr_t)table,
		.name = (uint64_t)(uintptr_t)"js:render@app.js",
	};
	int rc = codectl(CODE_REGISTER_JIT, &jit, sizeof jit, 0);
	printf("%d %d\n", n, rc);
	fflush(stdout);
	char line[16];
	/* Wait until the parent has looked. */
	if (!fgets(line, sizeof line, stdin))
		return 1;
	return 0;
}
