#include "pileprep/shard_plan.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pileprep {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(ParseFileNumbers, AcceptsListsAndInclusiveRanges) {
  EXPECT_THAT(*ParseFileNumbers("0,3,5-7"), ElementsAre(0, 3, 5, 6, 7));
  EXPECT_EQ(ParseFileNumbers("0-29")->size(), 30u);
  EXPECT_THAT(*ParseFileNumbers("7,1-2,2"), ElementsAre(1, 2, 7));  // sorted, no duplicates
  // Empty parts are skipped, as the launcher's convert_file_numbers skips them (`if elem == "":
  // continue`): a file_numbers value copied from its config ("0-29,") was refused.
  EXPECT_THAT(*ParseFileNumbers("1,"), ElementsAre(1));
  EXPECT_THAT(*ParseFileNumbers(",0-2,,5,"), ElementsAre(0, 1, 2, 5));
}

TEST(ParseFileNumbers, RejectsGarbage) {
  for (const char* bad : {"", ",", ",,", " ", "a", "1, ", "5-3", "-1", "1-", "10000", "1.5"}) {
    EXPECT_FALSE(ParseFileNumbers(bad).ok()) << bad;
  }
  // Nothing but empty parts: no file, said so (the launcher would run nothing).
  EXPECT_THAT(std::string(ParseFileNumbers(",,").status().message()), HasSubstr("names no file"));
  // A range written backwards is named as such (the general hint would list it as valid syntax).
  EXPECT_THAT(std::string(ParseFileNumbers("0,5-3").status().message()),
              HasSubstr("the range \"5-3\" runs backwards; write 3-5"));
}

TEST(ShardNames, FollowTheNemoLauncher) {
  EXPECT_EQ(ShardFileName(3), "03.jsonl.zst");
  EXPECT_EQ(ShardFileName(123), "123.jsonl.zst");
  EXPECT_EQ(ShardOutputPrefix("/data", "my-gpt3", 7), "/data/my-gpt3_07_text_document");
  EXPECT_EQ(ShardOutputPrefix("out/", "p", 12, "code"), "out/p_12_code_document");
}

TEST(ParseShardSource, ClassifiesUrls) {
  EXPECT_EQ(ParseShardSource("/data/pile")->kind, SourceKind::kLocalDirectory);
  EXPECT_EQ(ParseShardSource("file:///data/pile")->base, "/data/pile");
  // Schemes are case-insensitive (RFC 3986), file:// as http(s)://.
  EXPECT_EQ(ParseShardSource("FILE:///data/pile")->kind, SourceKind::kLocalDirectory);
  EXPECT_EQ(ParseShardSource("File:///data/pile")->base, "/data/pile");
  EXPECT_EQ(ParseShardSource("HTTPS://h/x")->kind, SourceKind::kHttp);
  EXPECT_EQ(ParseShardSource("https://h/x")->kind, SourceKind::kHttp);
  EXPECT_EQ(ShardInput(*ParseShardSource("https://h/x"), 2), "https://h/x/02.jsonl.zst");
  // A query (an Azure container's SAS token) stays after each file name; a fragment is dropped.
  EXPECT_EQ(ShardInput(*ParseShardSource("https://a.blob.core.windows.net/c?sv=1&sig=x%2F"), 7),
            "https://a.blob.core.windows.net/c/07.jsonl.zst?sv=1&sig=x%2F");
  EXPECT_EQ(ShardInput(*ParseShardSource("https://h/x/?t=1#frag"), 0),
            "https://h/x/00.jsonl.zst?t=1");
  EXPECT_EQ(ShardInput(*ParseShardSource("https://h/x#frag"), 0), "https://h/x/00.jsonl.zst");
  EXPECT_FALSE(ParseShardSource("ftp://h/x").ok());
  EXPECT_FALSE(ParseShardSource("file://relative").ok());
}

TEST(ParseShardSource, FileUrlsAreReadAsRfc8089) {
  // localhost is this machine; file:/p is file:///p; escapes are decoded (pathlib's as_uri()).
  EXPECT_EQ(ParseShardSource("file://localhost/data/pile")->base, "/data/pile");
  EXPECT_EQ(ParseShardSource("file://LocalHost/data")->base, "/data");
  EXPECT_EQ(ParseShardSource("file:/data/pile")->base, "/data/pile");
  EXPECT_EQ(ParseShardSource("file:///data/my%20pile%2fx")->base, "/data/my pile/x");
  // A '%' without two hex digits after it stays, as in Python's unquote().
  EXPECT_EQ(ParseShardSource("file:///data/100%/x%4")->base, "/data/100%/x%4");
  EXPECT_EQ(ParseShardSource("file:///data/%zz")->base, "/data/%zz");
  // A query or fragment is no part of the path (curl); escaped, '?' and '#' are.
  EXPECT_EQ(ParseShardSource("file:///data/pile?x=1")->base, "/data/pile");
  EXPECT_EQ(ParseShardSource("file:///data/pile#f")->base, "/data/pile");
  EXPECT_EQ(ParseShardSource("file:///data/a%3Fb%23c")->base, "/data/a?b#c");
  const auto other_host = ParseShardSource("file://nas/data");
  ASSERT_FALSE(other_host.ok());
  EXPECT_THAT(std::string(other_host.status().message()),
              testing::HasSubstr("host must be empty or localhost, not \"nas\""));
  EXPECT_FALSE(ParseShardSource("file://localhost").ok());
  EXPECT_FALSE(ParseShardSource("file:relative").ok());
  EXPECT_FALSE(ParseShardSource("file:///data/a%00b").ok());
  // A password may hold '?' or '#': the query and fragment start after user:password@ (split
  // before it, the password was taken for the host and printed).
  EXPECT_EQ(ShardInput(*ParseShardSource("http://alice:p?w@h/x?t=1"), 0),
            "http://alice:p?w@h/x/00.jsonl.zst?t=1");
  EXPECT_EQ(ShardInput(*ParseShardSource("http://alice:p#w@h/x"), 0),
            "http://alice:p#w@h/x/00.jsonl.zst");
  EXPECT_EQ(ShardInput(*ParseShardSource("https://h/x?mail=a@b"), 0),
            "https://h/x/00.jsonl.zst?mail=a@b");
  EXPECT_EQ(ShardInput(*ParseShardSource("https://h?mail=a@b"), 0),  // no path: still the query
            "https://h/00.jsonl.zst?mail=a@b");
  // An unsupported scheme's message leaves its credentials and query out.
  const absl::Status ftp = ParseShardSource("ftp://bob:hunter2@h/pile/?sig=s").status();
  EXPECT_THAT(std::string(ftp.message()), HasSubstr("--url ftp://h/pile/: unsupported scheme"));
  EXPECT_THAT(std::string(ftp.message()), Not(HasSubstr("hunter2")));
}

TEST(FilesForRank, IsTheLaunchersContiguousSplit) {
  const std::vector<int> files = {0, 1, 2, 3, 4, 5, 6};
  EXPECT_THAT(FilesForRank(files, 0, 4), ElementsAre(0));
  EXPECT_THAT(FilesForRank(files, 1, 4), ElementsAre(1, 2));
  EXPECT_THAT(FilesForRank(files, 2, 4), ElementsAre(3, 4));
  EXPECT_THAT(FilesForRank(files, 3, 4), ElementsAre(5, 6));
  // Every file exactly once, in order, for any number of ranks.
  for (int g = 1; g <= 12; ++g) {
    std::vector<int> all;
    for (int r = 0; r < g; ++r) {
      for (int f : FilesForRank(files, r, g)) all.push_back(f);
    }
    EXPECT_EQ(all, files) << g;
  }
  EXPECT_TRUE(FilesForRank(files, 4, 4).empty());
}

TEST(ResolveRank, EachFamilyOfVariables) {
  struct Case {
    Environment env;
    int rank, size;
    std::string decided_by;
  };
  const Case cases[] = {
      {{{"NGC_ARRAY_INDEX", "2"}, {"NGC_ARRAY_SIZE", "4"}},
       2,
       4,
       "NGC_ARRAY_INDEX=2 NGC_ARRAY_SIZE=4"},
      {{{"RANK", "3"}, {"WORLD_SIZE", "4"}}, 3, 4, "RANK=3 WORLD_SIZE=4"},
      {{{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "4"}},
       1,
       4,
       "OMPI_COMM_WORLD_RANK=1 OMPI_COMM_WORLD_SIZE=4"},
      // An srun step's task: srun sets SLURM_STEP_NUM_TASKS (and SLURM_NTASKS) in each.
      {{{"SLURM_PROCID", "3"}, {"SLURM_STEP_NUM_TASKS", "4"}, {"SLURM_NTASKS", "4"}},
       3,
       4,
       "SLURM_PROCID=3 SLURM_STEP_NUM_TASKS=4"},
      // BCP sets both NGC_ARRAY_* and RANK/WORLD_SIZE: NGC's come first, and another family that
      // says otherwise is named in the log; one that agrees is not.
      {{{"NGC_ARRAY_INDEX", "1"}, {"NGC_ARRAY_SIZE", "2"}, {"RANK", "9"}, {"WORLD_SIZE", "16"}},
       1,
       2,
       "NGC_ARRAY_INDEX=1 NGC_ARRAY_SIZE=2 (RANK=9 WORLD_SIZE=16 also set, not used; give --nodes "
       "and --rank to decide otherwise)"},
      {{{"NGC_ARRAY_INDEX", "1"}, {"NGC_ARRAY_SIZE", "2"}, {"RANK", "1"}, {"WORLD_SIZE", "2"}},
       1,
       2,
       "NGC_ARRAY_INDEX=1 NGC_ARRAY_SIZE=2"},
      // torchrun inside BCP replicas (its agent sets TORCHELASTIC_RUN_ID and LOCAL_WORLD_SIZE):
      // RANK/WORLD_SIZE count the processes that run and come first; by NGC_ARRAY_* every process
      // of a replica would take the replica's shares.
      {{{"NGC_ARRAY_INDEX", "1"},
        {"NGC_ARRAY_SIZE", "2"},
        {"RANK", "9"},
        {"WORLD_SIZE", "16"},
        {"LOCAL_RANK", "1"},
        {"LOCAL_WORLD_SIZE", "8"},
        {"TORCHELASTIC_RUN_ID", "none"}},
       9,
       16,
       "RANK=9 WORLD_SIZE=16 (torchrun's processes) (NGC_ARRAY_INDEX=1 NGC_ARRAY_SIZE=2 also set, "
       "not used; give --nodes and --rank to decide otherwise)"},
      // An srun step under torchrun: torchrun's RANK/WORLD_SIZE count the processes.
      {{{"RANK", "5"}, {"WORLD_SIZE", "16"}, {"SLURM_PROCID", "0"}, {"SLURM_STEP_NUM_TASKS", "2"}},
       5,
       16,
       "RANK=5 WORLD_SIZE=16 (SLURM_PROCID=0 SLURM_STEP_NUM_TASKS=2 also set, not used; give "
       "--nodes and --rank to decide otherwise)"},
      // MPICH / Intel MPI.
      {{{"PMI_RANK", "2"}, {"PMI_SIZE", "3"}}, 2, 3, "PMI_RANK=2 PMI_SIZE=3"},
      // Half a family does not count, and the log says it was seen.
      {{{"RANK", "3"}},
       0,
       1,
       "RANK=3 without WORLD_SIZE: no rank family complete, so one node (give --nodes and --rank "
       "to split)"},
      {{}, 0, 1, "no rank flags or variables: one node"},
  };
  for (const Case& c : cases) {
    auto a = ResolveRank({}, c.env);
    ASSERT_TRUE(a.ok()) << a.status();
    EXPECT_EQ(a->rank, c.rank) << c.decided_by;
    EXPECT_EQ(a->size, c.size) << c.decided_by;
    EXPECT_EQ(a->array_task, -1);
    EXPECT_EQ(a->decided_by, c.decided_by);
  }
}

TEST(ResolveRank, FlagsWinOverTheEnvironment) {
  const Environment env = {{"NGC_ARRAY_INDEX", "2"}, {"NGC_ARRAY_SIZE", "4"}};
  auto both = ResolveRank({.nodes = 3, .rank = 0}, env);
  ASSERT_TRUE(both.ok());
  EXPECT_EQ(both->rank, 0);
  EXPECT_EQ(both->size, 3);
  EXPECT_EQ(both->decided_by, "--nodes 3 --rank 0");
  // `pileprep --nodes $NGC_ARRAY_SIZE`: the rank comes from the environment.
  auto nodes_only = ResolveRank({.nodes = 4}, env);
  ASSERT_TRUE(nodes_only.ok());
  EXPECT_EQ(nodes_only->rank, 2);
  EXPECT_EQ(nodes_only->size, 4);
  EXPECT_EQ(nodes_only->decided_by, "--nodes 4, NGC_ARRAY_INDEX=2");
  auto rank_only = ResolveRank({.rank = 1}, {{"SLURM_STEP_NUM_TASKS", "2"}});
  ASSERT_TRUE(rank_only.ok());
  EXPECT_EQ(rank_only->size, 2);
  EXPECT_FALSE(ResolveRank({.nodes = 4}, {}).ok());
  EXPECT_TRUE(ResolveRank({.nodes = 1}, {}).ok());
}

TEST(ResolveRank, SlurmArrayTaskProcessesOneFile) {
  auto a = ResolveRank({}, {{"SLURM_ARRAY_TASK_ID", "5"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}});
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->array_task, 5);
  EXPECT_EQ(a->decided_by, "SLURM_ARRAY_TASK_ID=5");
  EXPECT_THAT(*FilesForAssignment({0, 1, 2, 3, 4, 5, 6}, *a), ElementsAre(5));
  EXPECT_FALSE(FilesForAssignment({0, 1}, *a).ok());
  // The batch script of `sbatch --array 0-29 --ntasks-per-node 8`: SLURM_NTASKS is the
  // allocation's, no step: still the array task's file (split by SLURM_PROCID=0 of 8 instead, all
  // 30 tasks made files 0-2 and none made 3-29).
  auto batch = ResolveRank(
      {}, {{"SLURM_ARRAY_TASK_ID", "17"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "8"}});
  ASSERT_TRUE(batch.ok());
  EXPECT_EQ(batch->array_task, 17);
}

// `sbatch --array 0-1` with `--files 0-29`: tasks 0 and 1 make files 00 and 01, exit 0, and 02..29
// are made by no one. Slurm's SLURM_ARRAY_TASK_MIN/MAX tell which (the CLI says so in each task's
// log; not refused: `--array 3,17` reruns two failed shards on purpose).
TEST(ResolveRank, FilesOutsideASlurmArraysTaskIdsAreNamed) {
  const Environment env = {{"SLURM_ARRAY_TASK_ID", "1"},
                           {"SLURM_ARRAY_TASK_MIN", "0"},
                           {"SLURM_ARRAY_TASK_MAX", "1"},
                           {"SLURM_ARRAY_TASK_COUNT", "2"}};
  auto a = ResolveRank({}, env);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->array_task, 1);
  std::vector<int> all(30);
  for (int i = 0; i < 30; ++i) all[i] = i;
  EXPECT_THAT(*FilesForAssignment(all, *a), ElementsAre(1));
  const std::vector<int> unmade = FilesNoArrayTaskMakes(all, *a);
  ASSERT_EQ(unmade.size(), 28u);
  EXPECT_EQ(unmade.front(), 2);
  EXPECT_TRUE(FilesNoArrayTaskMakes({0, 1}, *a).empty());
  // Not an array task (or no MIN/MAX): nothing to say.
  EXPECT_TRUE(FilesNoArrayTaskMakes(all, *ResolveRank({}, {})).empty());
  EXPECT_TRUE(FilesNoArrayTaskMakes(all, *ResolveRank({}, {{"SLURM_ARRAY_TASK_ID", "1"}})).empty());
  EXPECT_EQ(ArrayTasksMissingInRange(*a), 0);
}

// A stepped array (`--array 0-6:2`) makes no odd file, and a listed one (`--array 0-9,20-29`,
// MIN 0, MAX 29, COUNT 20) none of 10..19: the first are named; of the second Slurm tells only how
// many ids are missing, which is said.
TEST(ResolveRank, FilesOffAStepOrMissingFromAListedArrayAreSaid) {
  std::vector<int> all(30);
  for (int i = 0; i < 30; ++i) all[i] = i;
  auto stepped = ResolveRank({}, {{"SLURM_ARRAY_TASK_ID", "2"},
                                  {"SLURM_ARRAY_TASK_MIN", "0"},
                                  {"SLURM_ARRAY_TASK_MAX", "6"},
                                  {"SLURM_ARRAY_TASK_STEP", "2"},
                                  {"SLURM_ARRAY_TASK_COUNT", "4"}});
  ASSERT_TRUE(stepped.ok()) << stepped.status();
  EXPECT_THAT(FilesNoArrayTaskMakes({0, 1, 2, 3, 4, 5, 6}, *stepped), ElementsAre(1, 3, 5));
  EXPECT_EQ(ArrayTasksMissingInRange(*stepped), 0);
  auto listed = ResolveRank({}, {{"SLURM_ARRAY_TASK_ID", "20"},
                                 {"SLURM_ARRAY_TASK_MIN", "0"},
                                 {"SLURM_ARRAY_TASK_MAX", "29"},
                                 {"SLURM_ARRAY_TASK_STEP", "1"},
                                 {"SLURM_ARRAY_TASK_COUNT", "20"}});
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_TRUE(FilesNoArrayTaskMakes(all, *listed).empty());
  EXPECT_EQ(ArrayTasksMissingInRange(*listed), 10);
  // An irregular list (`--array 0,2,3`) with a step its count does not agree with: the step is not
  // trusted (file 03 would have been named as made by no task), the missing id counted.
  auto irregular = ResolveRank({}, {{"SLURM_ARRAY_TASK_ID", "3"},
                                    {"SLURM_ARRAY_TASK_MIN", "0"},
                                    {"SLURM_ARRAY_TASK_MAX", "3"},
                                    {"SLURM_ARRAY_TASK_STEP", "2"},
                                    {"SLURM_ARRAY_TASK_COUNT", "3"}});
  ASSERT_TRUE(irregular.ok()) << irregular.status();
  EXPECT_TRUE(FilesNoArrayTaskMakes({0, 1, 2, 3}, *irregular).empty());
  EXPECT_EQ(ArrayTasksMissingInRange(*irregular), 1);
}

// An srun step in an array task on a cluster whose srun sets PMI_RANK / PMI_SIZE (the pmi2 plugin:
// 0 of 1 in each task): Slurm's variables decide, each task its own file.
TEST(ResolveRank, PmiVariablesUnderSlurmDoNotSplit) {
  auto a = ResolveRank({}, {{"SLURM_JOB_ID", "77"},
                            {"SLURM_ARRAY_TASK_ID", "5"},
                            {"SLURM_PROCID", "0"},
                            {"SLURM_STEP_NUM_TASKS", "1"},
                            {"PMI_RANK", "0"},
                            {"PMI_SIZE", "1"}});
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->array_task, 5);
  // Outside Slurm (MPICH's mpiexec) they are a family.
  auto b = ResolveRank({}, {{"PMI_RANK", "1"}, {"PMI_SIZE", "2"}});
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->rank, 1);
  EXPECT_EQ(b->size, 2);
}

// MPICH's or Intel MPI's mpiexec inside a Slurm allocation: in a batch script (no srun step), or
// with Hydra's proxies launched by srun (a step of one task per node), PMI_* count the processes
// and Slurm's variables do not tell them apart: by Slurm's, every process took every file (batch
// script) or its node's share (all but one found it locked). PMI_* decide, Slurm's are named.
TEST(ResolveRank, MpiexecInsideASlurmAllocationSplitsByPmi) {
  auto batch = ResolveRank({}, {{"SLURM_JOB_ID", "9"},
                                {"SLURM_PROCID", "0"},
                                {"SLURM_NTASKS", "4"},
                                {"PMI_RANK", "2"},
                                {"PMI_SIZE", "4"}});
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_EQ(batch->rank, 2);
  EXPECT_EQ(batch->size, 4);
  EXPECT_EQ(batch->decided_by, "PMI_RANK=2 PMI_SIZE=4");
  auto proxies = ResolveRank({}, {{"SLURM_JOB_ID", "9"},
                                  {"SLURM_PROCID", "1"},
                                  {"SLURM_STEP_NUM_TASKS", "2"},
                                  {"PMI_RANK", "5"},
                                  {"PMI_SIZE", "8"}});
  ASSERT_TRUE(proxies.ok()) << proxies.status();
  EXPECT_EQ(proxies->rank, 5);
  EXPECT_EQ(proxies->size, 8);
  EXPECT_THAT(proxies->decided_by, HasSubstr("SLURM_PROCID=1 SLURM_STEP_NUM_TASKS=2 also set"));
  // `--nodes 8` alone takes the rank from PMI_RANK there too.
  auto nodes = ResolveRank({.nodes = 8}, {{"SLURM_JOB_ID", "9"},
                                          {"SLURM_PROCID", "1"},
                                          {"SLURM_STEP_NUM_TASKS", "2"},
                                          {"PMI_RANK", "5"},
                                          {"PMI_SIZE", "8"}});
  ASSERT_TRUE(nodes.ok()) << nodes.status();
  EXPECT_EQ(nodes->rank, 5);
  // srun's pmi2 plugin, agreeing with the step: Slurm's variables, as before.
  auto srun = ResolveRank({}, {{"SLURM_JOB_ID", "9"},
                               {"SLURM_PROCID", "3"},
                               {"SLURM_STEP_NUM_TASKS", "4"},
                               {"PMI_RANK", "3"},
                               {"PMI_SIZE", "4"}});
  ASSERT_TRUE(srun.ok()) << srun.status();
  EXPECT_EQ(srun->rank, 3);
  EXPECT_EQ(srun->size, 4);
  // mpiexec of several processes in an array task: which split is meant cannot be told.
  auto array = ResolveRank({}, {{"SLURM_JOB_ID", "9"},
                                {"SLURM_ARRAY_TASK_ID", "3"},
                                {"SLURM_PROCID", "0"},
                                {"PMI_RANK", "1"},
                                {"PMI_SIZE", "2"}});
  EXPECT_EQ(array.status().code(), absl::StatusCode::kInvalidArgument) << array.status();
  EXPECT_THAT(std::string(array.status().message()), HasSubstr("PMI_SIZE=2"));
  // ...with one flag too (--nodes took the rank from PMI_RANK: every array task made the same
  // share).
  auto array_nodes = ResolveRank({.nodes = 2}, {{"SLURM_JOB_ID", "9"},
                                                {"SLURM_ARRAY_TASK_ID", "3"},
                                                {"SLURM_PROCID", "0"},
                                                {"PMI_RANK", "1"},
                                                {"PMI_SIZE", "2"}});
  EXPECT_EQ(array_nodes.status().code(), absl::StatusCode::kInvalidArgument)
      << (array_nodes.ok() ? array_nodes->decided_by : "");
  EXPECT_THAT(std::string(array_nodes.status().message()), HasSubstr("PMI_SIZE=2"));
}

// Open MPI's mpirun or torchrun inside a Slurm array task: as mpiexec's (above), several processes
// are refused; split by them, every array task made the same shares of --files (each file made
// once per array task, the summaries of rank r overwriting each other). One process splits
// nothing: the array task's number decides, as without the launcher (it took every file in every
// task).
TEST(ResolveRank, LaunchersInsideASlurmArrayTaskAreRefusedUnlessOneProcess) {
  const Environment array = {{"SLURM_JOB_ID", "5"},
                             {"SLURM_ARRAY_TASK_ID", "3"},
                             {"SLURM_ARRAY_TASK_MIN", "0"},
                             {"SLURM_ARRAY_TASK_MAX", "6"},
                             {"SLURM_PROCID", "0"}};
  auto with = [&](std::initializer_list<std::pair<const std::string, std::string>> more) {
    Environment env = array;
    env.insert(more);
    return env;
  };
  for (const Environment& env :
       {with({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "4"}}),
        with({{"RANK", "1"},
              {"WORLD_SIZE", "2"},
              {"LOCAL_WORLD_SIZE", "2"},
              {"TORCHELASTIC_RUN_ID", "x"}})}) {
    for (const RankFlags& flags : {RankFlags{}, RankFlags{.nodes = 4}, RankFlags{.rank = 1}}) {
      auto a = ResolveRank(flags, env);
      ASSERT_FALSE(a.ok()) << a->decided_by;
      EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);
      EXPECT_THAT(std::string(a.status().message()),
                  HasSubstr("Slurm array task (SLURM_ARRAY_TASK_ID=3) running"));
    }
  }
  for (const Environment& env :
       {with({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "1"}}),
        with({{"RANK", "0"},
              {"WORLD_SIZE", "1"},
              {"LOCAL_WORLD_SIZE", "1"},
              {"TORCHELASTIC_RUN_ID", "x"}})}) {
    auto a = ResolveRank({}, env);
    ASSERT_TRUE(a.ok()) << a.status();
    EXPECT_EQ(a->array_task, 3);
    EXPECT_EQ(a->decided_by, "SLURM_ARRAY_TASK_ID=3");
    // A single flag there is refused as in any array task.
    auto one = ResolveRank({.nodes = 1}, env);
    ASSERT_FALSE(one.ok()) << one->decided_by;
    EXPECT_THAT(std::string(one.status().message()), HasSubstr("--nodes 1 in a Slurm array task"));
  }
  // A launcher of one process in an array task's srun step of several tasks: the step is what is
  // refused (it was called "1 processes of a launcher").
  auto step = ResolveRank({}, with({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"LOCAL_WORLD_SIZE", "1"},
                                    {"TORCHELASTIC_RUN_ID", "x"}, {"SLURM_STEP_NUM_TASKS", "2"},
                                    {"SLURM_PROCID", "1"}}));
  ASSERT_FALSE(step.ok()) << step->decided_by;
  EXPECT_THAT(std::string(step.status().message()), HasSubstr("running an srun step of 2 tasks"));
  // Both flags decide alone, as ever.
  auto both = ResolveRank({.nodes = 4, .rank = 1},
                          with({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "4"}}));
  ASSERT_TRUE(both.ok()) << both.status();
  EXPECT_EQ(both->rank, 1);
}

// Each array task running a 2-task srun step: split by SLURM_PROCID, every array task made the same
// halves of --files; by the array task's number, both step tasks made one file. Refused, unless the
// flags decide.
TEST(ResolveRank, SlurmArrayOfMultiTaskStepsIsRefusedUnlessTheFlagsDecide) {
  const Environment env = {{"SLURM_ARRAY_TASK_ID", "5"},
                           {"SLURM_PROCID", "1"},
                           {"SLURM_STEP_NUM_TASKS", "2"},
                           {"SLURM_NTASKS", "2"}};
  for (const RankFlags& flags : {RankFlags{}, RankFlags{.nodes = 2}, RankFlags{.rank = 1}}) {
    auto a = ResolveRank(flags, env);
    ASSERT_FALSE(a.ok()) << a->decided_by;
    EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(a.status().message()),
                HasSubstr("Slurm array task (SLURM_ARRAY_TASK_ID=5) running an srun step of 2"));
  }
  auto both = ResolveRank({.nodes = 2, .rank = 1}, env);
  ASSERT_TRUE(both.ok()) << both.status();
  EXPECT_EQ(both->rank, 1);
}

// `--nodes N` alone takes SLURM_PROCID only in an srun step: a batch script's process, and each
// array task, has SLURM_PROCID=0 (taken, `--nodes 30` in a 30-task array made file 00 30 times and
// the rest never, exit 0).
TEST(ResolveRank, NodesAloneTakesSlurmProcidOnlyInAnSrunStep) {
  auto array = ResolveRank(
      {.nodes = 30}, {{"SLURM_ARRAY_TASK_ID", "5"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}});
  ASSERT_FALSE(array.ok()) << array->decided_by;
  EXPECT_THAT(std::string(array.status().message()),
              HasSubstr("--nodes 30 in a Slurm array task (SLURM_ARRAY_TASK_ID=5)"));
  // The same in the one-task srun step an array task usually runs (not "an srun step of 1 tasks").
  auto step1 = ResolveRank({.nodes = 7}, {{"SLURM_ARRAY_TASK_ID", "5"},
                                          {"SLURM_PROCID", "0"},
                                          {"SLURM_STEP_NUM_TASKS", "1"},
                                          {"SLURM_NTASKS", "1"}});
  ASSERT_FALSE(step1.ok()) << step1->decided_by;
  EXPECT_THAT(std::string(step1.status().message()),
              HasSubstr("--nodes 7 in a Slurm array task (SLURM_ARRAY_TASK_ID=5)"));
  auto batch = ResolveRank({.nodes = 4}, {{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}});
  ASSERT_FALSE(batch.ok()) << batch->decided_by;
  EXPECT_THAT(std::string(batch.status().message()), HasSubstr("--nodes 4 needs --rank R"));
  auto step = ResolveRank(
      {.nodes = 4}, {{"SLURM_PROCID", "2"}, {"SLURM_STEP_NUM_TASKS", "4"}, {"SLURM_NTASKS", "4"}});
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_EQ(step->rank, 2);
  EXPECT_EQ(step->decided_by, "--nodes 4, SLURM_PROCID=2");
}

// One flag and its family's other variable must agree: `--nodes 4` on two BCP replicas made ranks
// 0 and 1 of 4, the other half of the files made by no one, exit 0.
TEST(ResolveRank, OneFlagThatContradictsItsFamilyIsRefused) {
  const Environment two = {{"NGC_ARRAY_INDEX", "1"}, {"NGC_ARRAY_SIZE", "2"}};
  auto nodes = ResolveRank({.nodes = 4}, two);
  ASSERT_FALSE(nodes.ok()) << nodes->decided_by;
  EXPECT_THAT(std::string(nodes.status().message()),
              HasSubstr("--nodes 4 but NGC_ARRAY_SIZE=2 (with NGC_ARRAY_INDEX=1)"));
  auto rank = ResolveRank({.rank = 0}, {{"RANK", "1"}, {"WORLD_SIZE", "2"}});
  ASSERT_FALSE(rank.ok()) << rank->decided_by;
  EXPECT_THAT(std::string(rank.status().message()), HasSubstr("--rank 0 but RANK=1"));
  EXPECT_TRUE(ResolveRank({.nodes = 2}, two).ok());
  EXPECT_TRUE(ResolveRank({.nodes = 4, .rank = 3}, two).ok());  // both flags decide alone
  // `--nodes $NGC_ARRAY_SIZE` in a process torchrun started in each replica: its rank would come
  // from torchrun's RANK, which WORLD_SIZE=16 says is not a rank of 2.
  const Environment torchrun = {{"NGC_ARRAY_INDEX", "1"},
                                {"NGC_ARRAY_SIZE", "2"},
                                {"RANK", "9"},
                                {"WORLD_SIZE", "16"},
                                {"LOCAL_WORLD_SIZE", "8"}};
  auto under_torchrun = ResolveRank({.nodes = 2}, torchrun);
  ASSERT_FALSE(under_torchrun.ok()) << under_torchrun->decided_by;
  EXPECT_THAT(std::string(under_torchrun.status().message()),
              HasSubstr("--nodes 2 but WORLD_SIZE=16 (with RANK=9)"));
}

// `sbatch -N 4 --ntasks-per-node 1 job.sh` whose script runs pileprep itself, without srun: one
// process, with SLURM_PROCID=0 and SLURM_NTASKS=4 (the allocation's). It takes every file and says
// why, instead of a quarter of them, the rest made by no one.
TEST(ResolveRank, SlurmBatchScriptWithoutSrunIsOneProcessThatTakesEveryFile) {
  auto a = ResolveRank({}, {{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}, {"SLURM_JOB_ID", "77"}});
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->rank, 0);
  EXPECT_EQ(a->size, 1);
  EXPECT_EQ(a->array_task, -1);
  EXPECT_THAT(a->decided_by, HasSubstr("SLURM_NTASKS=4 but no SLURM_STEP_NUM_TASKS"));
  EXPECT_THAT(a->decided_by, HasSubstr("srun"));
  EXPECT_EQ(FilesForAssignment({0, 1, 2, 3, 4, 5, 6}, *a)->size(), 7u);
  // A single-task batch script is the plain single-node case.
  auto one = ResolveRank({}, {{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}});
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->decided_by, "no rank flags or variables: one node");
}

TEST(ResolveRank, RejectsNonsenseNamingTheVariable) {
  auto a = ResolveRank({}, {{"RANK", "x"}, {"WORLD_SIZE", "4"}});
  ASSERT_FALSE(a.ok());
  EXPECT_THAT(std::string(a.status().message()), ::testing::HasSubstr("RANK=\"x\""));
  auto b = ResolveRank({}, {{"RANK", "4"}, {"WORLD_SIZE", "4"}});
  ASSERT_FALSE(b.ok());
  EXPECT_THAT(std::string(b.status().message()), ::testing::HasSubstr("RANK=4 WORLD_SIZE=4"));
  EXPECT_FALSE(ResolveRank({.nodes = 0, .rank = 0}, {}).ok());
}

}  // namespace
}  // namespace pileprep
