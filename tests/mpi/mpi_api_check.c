/*
 * mpi_api_check.c — libnostall_mpi's API edges, one rank (run under
 * `mpirun -np 1` by tests/mpi/run.sh mpi_api): the thread level is
 * checked (MPI initialised with MPI_THREAD_SERIALIZED here, so attach must
 * fail with E_INVALID naming the level), NULL arguments, detach(NULL).
 * Exit 0 pass, 1 fail.
 */
#include <stdio.h>
#include <string.h>

#include "nostall_mpi.h"

static int failures;
#define CHECK(c)                                                               \
    do {                                                                       \
        if (!(c)) {                                                            \
            fprintf(stderr, "FAIL %s:%d: %s (last error: %s)\n", __FILE__,     \
                    __LINE__, #c, nostall_last_error());                       \
            failures++;                                                        \
        }                                                                      \
    } while (0)

int main(int argc, char **argv)
{
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
    const char *data = argc > 1 ? argv[1] : ".";
    nostall_config *cfg;
    nostall_config_create(&cfg);
    nostall_mpi *pc = (nostall_mpi *)&provided;

    CHECK(nostall_mpi_attach(NULL, cfg, MPI_COMM_WORLD, data, 1 << 20) == NOSTALL_E_INVALID);
    CHECK(nostall_mpi_attach(&pc, NULL, MPI_COMM_WORLD, data, 1 << 20) == NOSTALL_E_INVALID);
    CHECK(pc == NULL);
    CHECK(nostall_mpi_attach(&pc, cfg, MPI_COMM_WORLD, NULL, 1 << 20) == NOSTALL_E_INVALID);
    if (provided < MPI_THREAD_MULTIPLE) {
        CHECK(nostall_mpi_attach(&pc, cfg, MPI_COMM_WORLD, data, 1 << 20) == NOSTALL_E_INVALID);
        CHECK(strstr(nostall_last_error(), "MPI_THREAD_MULTIPLE") != NULL);
        CHECK(pc == NULL);
        printf("thread level check: %s\n", nostall_last_error());
    }
    nostall_mpi_stats st;
    CHECK(nostall_mpi_stats_get(NULL, &st, sizeof st) == NOSTALL_E_INVALID);
    CHECK(nostall_mpi_detach(NULL) == 0);
    nostall_config_free(cfg);
    MPI_Finalize();
    if (!failures) printf("PASS\n");
    return failures ? 1 : 0;
}
