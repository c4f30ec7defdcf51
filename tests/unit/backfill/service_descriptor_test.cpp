// The agent's checks of the descriptors a client hands over (service.cpp, output_file.hpp,
// docs/backfill.md "Security"), with crafted descriptors, as a hostile client would send them: the
// CLI always sends good ones, so nothing else tests these. Also who may see a batch, and a resume's
// checks that the file handed over is the batch's output.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "service_support.hpp"
#include "tarmac/backfill/output_file.hpp"

namespace tarmac::backfill {
namespace {

using test_support::request_lines;
using test_support::sealed_input;
using test_support::ServiceFixture;
using test_support::submitter_uid;

class ServiceDescriptors : public ServiceFixture {
 protected:
  // The refusal of a submission of one request from `uid` with `input` and `out`.
  std::string refusal(uid_t uid, util::Fd input, util::Fd out) {
    auto answer = submit(uid, std::move(input), std::move(out));
    EXPECT_FALSE(answer.value("ok", true)) << answer;
    return words(answer);
  }
  util::Fd fifo(const std::string& name) {
    const std::string path = dir_ + "/" + name;
    EXPECT_EQ(::mkfifo(path.c_str(), 0600), 0);
    return util::Fd(::open(path.c_str(), O_RDWR | O_NONBLOCK | O_CLOEXEC));
  }
  // Batch 1 of `uid`, its output kept here as `out`.
  void submit_batch(uid_t uid, util::Fd& out) {
    out = output("out.jsonl", uid);
    ASSERT_TRUE(submit(uid, sealed_input(request_lines(2)), util::Fd(::dup(out.get()))).value("ok", false));
  }
  nlohmann::json resume(uid_t uid, util::Fd out) {
    std::vector<util::Fd> fds;
    fds.push_back(std::move(out));
    return ask(uid, std::move(fds), {{"op", "backfill_resume"}, {"id", 1}});
  }
};

TEST_F(ServiceDescriptors, AnInputThatIsNotASealedMemfdIsRefused) {
  const uid_t uid = submitter_uid();
  const std::string wanted = "the input must come as a sealed memfd";
  // A FIFO would block the scheduler's thread; an unsealed memfd or a file could change under it.
  EXPECT_NE(refusal(uid, fifo("in.fifo"), output("o1", uid)).find(wanted), std::string::npos);
  EXPECT_NE(refusal(uid, sealed_input(request_lines(1), 0), output("o2", uid)).find(wanted), std::string::npos);
  EXPECT_NE(refusal(uid, sealed_input(request_lines(1), F_SEAL_WRITE), output("o3", uid)).find(wanted),
            std::string::npos);
  EXPECT_NE(refusal(uid, output("in.jsonl", uid), output("o4", uid)).find(wanted), std::string::npos);
  // A sealed memfd larger than a batch may be is refused before it is read.
  limits_.max_input_bytes = 100;
  open_service();
  EXPECT_NE(refusal(uid, sealed_input(request_lines(2)), output("o5", uid)).find("more than the 100"),
            std::string::npos);
}

TEST_F(ServiceDescriptors, AnOutputThatIsNotTheSubmittersOwnEmptyWritableRegularFileIsRefused) {
  const uid_t uid = submitter_uid();
  const auto refused = [&](util::Fd out) { return refusal(uid, sealed_input(request_lines(1)), std::move(out)); };
  EXPECT_NE(refused(fifo("out.fifo")).find("not a regular file"), std::string::npos);
  EXPECT_NE(refused(output("readonly", uid, O_RDONLY)).find("reading and writing"), std::string::npos);
  util::Fd full = output("full", uid);
  ASSERT_EQ(::write(full.get(), "x\n", 2), 2);
  EXPECT_NE(refused(std::move(full)).find("not empty"), std::string::npos);
  util::Fd linked = output("linked", uid);
  ASSERT_EQ(::link((dir_ + "/linked").c_str(), (dir_ + "/linked2").c_str()), 0);
  EXPECT_NE(refused(std::move(linked)).find("hard links"), std::string::npos);
  if (::getuid() != 0) GTEST_SKIP() << "another user's file needs root to make";
  EXPECT_NE(refused(output("roots", 0)).find("not the submitter's own file"), std::string::npos);
}

TEST_F(ServiceDescriptors, AnOutputOnAFileSystemOtherThanADiskOrNfsIsRefusedWithoutAskingIt) {
  const uid_t uid = submitter_uid();
  // procfs: root's writes would reach the kernel's files.
  util::Fd proc(::open("/proc/self/comm", O_RDWR | O_CLOEXEC));
  ASSERT_TRUE(proc.valid());
  EXPECT_NE(refusal(uid, sealed_input(request_lines(1)), std::move(proc)).find("on a proc file system"),
            std::string::npos);
  // tmpfs: its pages would be charged to the agent's memory.
  if (!std::filesystem::is_directory("/dev/shm")) GTEST_SKIP() << "no /dev/shm";
  char tmpl[] = "/dev/shm/tarmac-test-XXXXXX";
  util::Fd shm(::mkstemp(tmpl));
  ASSERT_TRUE(shm.valid());
  ::unlink(tmpl);
  if (uid != ::getuid()) ASSERT_EQ(::fchown(shm.get(), uid, static_cast<gid_t>(-1)), 0);
  EXPECT_NE(refusal(uid, sealed_input(request_lines(1)), std::move(shm)).find("on a tmpfs file system"),
            std::string::npos);
}

TEST(OutputFile, TheMountTypeIsReadFromMountinfoByItsId) {
  const std::string info =
      "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"
      "36 22 0:45 / /mnt/fuse rw,nosuid master:7 - fuse.sshfs host:/ rw,user_id=1000\n"
      "37 22 0:46 / /x rw shared:2 shared:3 - nfs4 srv:/x rw\n"
      "38 22 0:47 / /broken rw\n";
  EXPECT_EQ(mount_type(info, 22), "ext4");
  EXPECT_EQ(mount_type(info, 36), "fuse.sshfs");
  EXPECT_EQ(mount_type(info, 37), "nfs4");
  EXPECT_EQ(mount_type(info, 38), std::nullopt);
  EXPECT_EQ(mount_type(info, 2), std::nullopt) << "2 is not 22";
  EXPECT_TRUE(output_file_system_allowed("xfs"));
  for (const char* type : {"fuse", "fuse.sshfs", "fuseblk", "tmpfs", "proc", "cgroup2", "sysfs", "overlay", ""}) {
    EXPECT_FALSE(output_file_system_allowed(type)) << type;
  }
}

TEST_F(ServiceDescriptors, AnotherUsersBatchIsNoBatchToThem) {
  const uid_t uid = submitter_uid();
  if (uid == ::getuid()) GTEST_SKIP() << "needs root to act as a second user";
  util::Fd out;
  submit_batch(0, out);  // root's batch
  const auto before = ask(0, {}, {{"op", "backfill_status"}, {"id", 1}})["batch"];
  for (const char* op : {"backfill_status", "backfill_cancel"}) {
    auto answer = ask(uid, {}, {{"op", op}, {"id", 1}});
    EXPECT_FALSE(answer.value("ok", true)) << op;
    EXPECT_EQ(words(answer), "no batch 1") << op << ": neither its owner nor that it exists";
  }
  EXPECT_EQ(words(resume(uid, util::Fd(::dup(out.get())))), "no batch 1");
  auto listed = ask(uid, {}, {{"op", "backfill_status"}});
  EXPECT_TRUE(listed["batches"].empty());
  const auto after = ask(0, {}, {{"op", "backfill_status"}, {"id", 1}})["batch"];
  EXPECT_EQ(after.value("state", ""), before.value("state", "")) << "nothing changed";
  EXPECT_EQ(after.value("state", ""), "running") << "held by the dispatcher (outside its window)";
  EXPECT_EQ(after.value("pending", 0), before.value("pending", -1));
}

TEST_F(ServiceDescriptors, AResumeWhileTheAgentHoldsTheOutputStillChecksTheFileItIsGiven) {
  const uid_t uid = submitter_uid();
  util::Fd out;
  submit_batch(uid, out);
  auto wrong = resume(uid, output("other.jsonl", uid));
  EXPECT_FALSE(wrong.value("ok", true));
  EXPECT_NE(words(wrong).find("not batch 1's output"), std::string::npos) << wrong;
  EXPECT_TRUE(resume(uid, util::Fd(::dup(out.get()))).value("ok", false));
}

TEST_F(ServiceDescriptors, AResumeRefusesAFileThatHasTheInodeNumberButNotTheLinesOfTheOutput) {
  const uid_t uid = submitter_uid();
  util::Fd out;
  submit_batch(uid, out);
  // The batch's first answer, as the ledger records it: its line in the output, then the store.
  const std::string line = R"({"id":"batch_req_1_0","custom_id":"r0","response":null,"error":null})" "\n";
  ASSERT_EQ(::pwrite(out.get(), line.data(), line.size(), 0), static_cast<ssize_t>(line.size()));
  {
    auto db = BatchDb::open(dir_ + "/tarmac.db");
    ASSERT_TRUE(db.ok());
    Answered a;
    a.index = 0;
    a.out_offset = 0;
    a.out_len = static_cast<long long>(line.size());
    ASSERT_TRUE(db->commit(1, Commit{{a}, {}, false, a.out_len}).ok());
  }
  open_service();  // the agent restarted: the output waits to be handed over again
  // The owner replaced the output's contents (as a new file given the same inode number would
  // look): the recorded line is not there.
  const std::string other = R"({"id":"batch_req_9_0","custom_id":"zz","response":null,"error":null})" "\n";
  ASSERT_EQ(::pwrite(out.get(), other.data(), other.size(), 0), static_cast<ssize_t>(other.size()));
  auto refused = resume(uid, util::Fd(::dup(out.get())));
  EXPECT_FALSE(refused.value("ok", true));
  EXPECT_NE(words(refused).find("is not batch_req_1_0"), std::string::npos) << refused;
  // With its own line back, the same file is accepted.
  ASSERT_EQ(::pwrite(out.get(), line.data(), line.size(), 0), static_cast<ssize_t>(line.size()));
  EXPECT_TRUE(resume(uid, util::Fd(::dup(out.get()))).value("ok", false));
}

TEST_F(ServiceDescriptors, AResumeRefusesAFileBornAfterTheOutputWithItsInodeNumber) {
  const uid_t uid = submitter_uid();
  util::Fd out;
  submit_batch(uid, out);
  auto db = store::Database::open(dir_ + "/tarmac.db", store::Database::Mode::ReadWrite);
  ASSERT_TRUE(db.ok());
  if (birth_time_ns(out.get()) == 0) GTEST_SKIP() << "this file system keeps no birth times";
  EXPECT_EQ(db->scalar("SELECT output_btime_ns FROM backfill_batch WHERE id = 1")->value_or(0),
            birth_time_ns(out.get()));
  // As if the inode number had been freed and reused: a birth time other than the one recorded.
  ASSERT_TRUE(db->exec("UPDATE backfill_batch SET output_btime_ns = output_btime_ns - 1 WHERE id = 1").ok());
  open_service();
  auto refused = resume(uid, util::Fd(::dup(out.get())));
  EXPECT_FALSE(refused.value("ok", true));
  EXPECT_NE(words(refused).find("a file made later"), std::string::npos) << refused;
}

}  // namespace
}  // namespace tarmac::backfill
