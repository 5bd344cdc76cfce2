/*
 * commands.h — the nostall CLI's subcommands. Each takes the arguments after
 * the subcommand name (argv[0] is the subcommand) and returns the process
 * exit status: 0 success, 1 runtime failure, 2 usage error (one-line message
 * on stderr).
 */
#ifndef NOSTALL_TOOLS_COMMANDS_H
#define NOSTALL_TOOLS_COMMANDS_H

int cmd_gen(int argc, char **argv);       /* gen.c:   write a synthetic ImageFolder dataset */
int cmd_bench(int argc, char **argv);     /* bench.c: run the loader, report throughput     */
int cmd_transcode(int argc, char **argv); /* transcode.c: lossless JPEG copy with restart
                                             markers for faster region decode            */
int cmd_analyze(int argc, char **argv);   /* analyze.c: where the data stall comes from, what-if
                                           predictions and recommendations              */
int cmd_pack(int argc, char **argv);      /* pack.c: WebDataset tar shards with index files  */
int cmd_serve(int argc, char **argv);     /* serve.c: a prep server for loaders elsewhere    */

#endif
