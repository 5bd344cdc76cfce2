/*
 * tool_mpi.h — the CLI's side of the partitioned cache (libnostall_mpi):
 * `nostall bench DATA --partitioned-cache BYTES` under mpirun/srun. Compiled
 * into the CLI only where MPI is found (cmake/mpi.cmake defines
 * NOSTALL_HAVE_MPI). The tool, not the library, initialises MPI.
 */
#ifndef NOSTALL_TOOLS_MPI_TOOL_MPI_H
#define NOSTALL_TOOLS_MPI_TOOL_MPI_H

#include <stdio.h>

#include "nostall.h"

/* Initialise MPI (MPI_THREAD_MULTIPLE) unless already initialised, set
 * cfg's rank and world_size from MPI_COMM_WORLD, and attach a partitioned
 * cache of `cache_bytes` ("8G", "25%", a byte count: parsed like the
 * cache_bytes option) on this rank to cfg. 0 on success; otherwise prints
 * "nostall bench: rank R: <why>" on stderr and returns 1. *handle is always
 * set (NULL-safe for the calls below). */
int tool_mpi_attach(nostall_config *cfg, const char *source, const char *cache_bytes,
                    void **handle);
/* Append this rank's partitioned-cache figures: json = 1 writes
 * `, "partitioned_cache": {...}` (to go before the object's closing brace);
 * json = 0 writes indented summary lines. */
void tool_mpi_report(void *handle, FILE *f, int json);
/* After the loader is freed: detach (collective, bounded), then
 * MPI_Finalize (if the tool initialised MPI). When some rank never reached
 * detach (gone), Finalize could block: the process exits at once with
 * `status` instead. */
void tool_mpi_end(void *handle, int status);

#endif
